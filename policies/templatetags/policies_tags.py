"""Template filters of the policy pages: a change-log entry and a rule field in words."""

from __future__ import annotations

from typing import Any

from django import template

from policies.models import PolicyChange

register = template.Library()

_ACTIONS = {
    "policies.policy.created": "created the policy",
    "policies.draft.created": "created a draft",
    "policies.draft.settings_changed": "changed the sensitive systems",
    "policies.rule.added": "added a rule",
    "policies.rule.updated": "changed a rule",
    "policies.rule.deleted": "deleted a rule",
    "policies.rule.moved": "moved a rule",
    "policies.version.published": "published",
    "policies.version.reverted": "reverted",
}


@register.filter
def value_text(value: Any) -> str:
    """A rule field's value as an admin reads it."""
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@register.filter
def change_action(change: PolicyChange) -> str:
    return _ACTIONS.get(change.action, change.action)


@register.filter
def change_summary(change: PolicyChange) -> str:
    """What changed, in one line, from the entry's recorded detail."""
    d = change.detail or {}
    action = change.action
    if action == "policies.draft.created":
        source = d.get("from_version")
        return f"from v{source} ({d.get('rules', 0)} rules)" if source else "empty draft"
    if action == "policies.draft.settings_changed":
        before, after = d.get("sensitive_systems", [[], []])
        return f"sensitive systems {value_text(before)} → {value_text(after)}"
    if action in ("policies.rule.added", "policies.rule.deleted"):
        return f"'{d.get('rule')}' at position {d.get('position')}"
    if action == "policies.rule.moved":
        return f"'{d.get('rule')}' from position {d.get('from')} to {d.get('to')}"
    if action == "policies.rule.updated":
        changed = d.get("changed", {})
        parts = [
            f"{name.replace('_', ' ')} {value_text(pair[0])} → {value_text(pair[1])}"
            for name, pair in changed.items()
        ]
        return f"'{d.get('rule')}': " + "; ".join(parts)
    if action == "policies.version.published":
        return f"as v{d.get('number')}: {d.get('change_note', '')}"
    if action == "policies.version.reverted":
        return f"to v{d.get('to_version')}, published as v{d.get('number')}: " + str(
            d.get("change_note", "")
        )
    return ""
