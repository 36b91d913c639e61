"""Template filters of the policy pages: a change-log entry and a rule field in words."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.translation import gettext_lazy, pgettext

from policies.models import PolicyChange
from policies.phrases import Phrase, gettext_noop

register = template.Library()

_ACTIONS = {
    "policies.policy.created": gettext_lazy("created the policy"),
    "policies.draft.created": gettext_lazy("created a draft"),
    "policies.draft.settings_changed": gettext_lazy("changed the sensitive systems"),
    "policies.rule.added": gettext_lazy("added a rule"),
    "policies.rule.updated": gettext_lazy("changed a rule"),
    "policies.rule.deleted": gettext_lazy("deleted a rule"),
    "policies.rule.moved": gettext_lazy("moved a rule"),
    "policies.version.published": gettext_lazy("published"),
    "policies.version.reverted": gettext_lazy("reverted"),
}


@register.filter
def value_text(value: Any) -> str:
    """A rule field's value as an admin reads it (yes and no in the reader's language)."""
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return pgettext("field value", "yes") if value else pgettext("field value", "no")
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@register.filter
def change_action(change: PolicyChange) -> str:
    return str(_ACTIONS.get(change.action, change.action))


@register.filter
def change_summary(change: PolicyChange) -> str:
    """What changed, in one line, from the entry's recorded detail: a `Phrase`, so a page shows
    it in the reader's language with the recorded names and notes kept as written."""
    d = change.detail or {}
    action = change.action
    if action == "policies.draft.created":
        source = d.get("from_version")
        if not source:
            return Phrase(gettext_noop("empty draft"))
        return Phrase(
            gettext_noop("from v%(version)s (%(count)s rules)"),
            {"version": source, "count": d.get("rules", 0)},
        )
    if action == "policies.draft.settings_changed":
        before, after = d.get("sensitive_systems", [[], []])
        return Phrase(
            gettext_noop("sensitive systems %(before)s → %(after)s"),
            {"before": value_text(before), "after": value_text(after)},
        )
    if action in ("policies.rule.added", "policies.rule.deleted"):
        return Phrase(
            gettext_noop("'%(rule)s' at position %(position)s"),
            {"rule": str(d.get("rule")), "position": d.get("position")},
        )
    if action == "policies.rule.moved":
        return Phrase(
            gettext_noop("'%(rule)s' from position %(from)s to %(to)s"),
            {"rule": str(d.get("rule")), "from": d.get("from"), "to": d.get("to")},
        )
    if action == "policies.rule.updated":
        changed = d.get("changed", {})
        parts = "; ".join(
            f"{name.replace('_', ' ')} {value_text(pair[0])} → {value_text(pair[1])}"
            for name, pair in changed.items()
        )
        return Phrase(
            gettext_noop("'%(rule)s': %(changes)s"), {"rule": str(d.get("rule")), "changes": parts}
        )
    if action == "policies.version.published":
        return Phrase(
            gettext_noop("as v%(number)s: %(note)s"),
            {"number": d.get("number"), "note": str(d.get("change_note", ""))},
        )
    if action == "policies.version.reverted":
        return Phrase(
            gettext_noop("to v%(version)s, published as v%(number)s: %(note)s"),
            {
                "version": d.get("to_version"),
                "number": d.get("number"),
                "note": str(d.get("change_note", "")),
            },
        )
    return ""
