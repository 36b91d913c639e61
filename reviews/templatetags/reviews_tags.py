"""Template helpers of the review workspace: time left before a gate times out, how long an item
has waited. Filters return plain strings (autoescaped by the template like any other value).

The review section of the task page is `reviews.task_page`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.translation import gettext as _

from agentops.engine import change_text
from agentops.selectors import json_preview
from agentops.templatetags import agentops_tags
from policies.phrases import Phrase
from reviews.selectors.approvals import gate_approval_progress
from reviews.selectors.audit import reservation_in_force

register = template.Library()


def _span(seconds: float) -> str:
    seconds = int(abs(seconds))
    if seconds < 60:
        return _("%(n)s s") % {"n": seconds}
    minutes = seconds // 60
    if minutes < 60:
        return _("%(n)s min") % {"n": minutes}
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return _("%(hours)s h %(minutes)s min") % {"hours": hours, "minutes": f"{minutes:02d}"}
    return _("%(n)s days") % {"n": hours // 24}


def _span_steady_for(seconds: float, *, rising: bool) -> float:
    """How many seconds `_span(seconds)` prints the same text while the span grows (`rising`: a
    time waited, an overdue) or shrinks (a time left): to the next whole unit it prints."""
    value = abs(seconds)
    unit = 1 if value < 60 else 60 if value < 48 * 3600 else 86400
    into = value % unit
    return unit - into if rising else into


def times_steady_until(
    *, deadlines: Iterable[datetime], sinces: Iterable[datetime], now: datetime
) -> datetime | None:
    """The first time after `now` that `time_left` or `overdue` of one of `deadlines`, or `waited`
    of one of `sinces`, prints something else (None: nothing is printed). Until then a page of
    them reads the same, so a poll's version may say so (the inbox's)."""
    spans = [(due - now).total_seconds() for due in deadlines]
    steady = [_span_steady_for(s, rising=s < 0) for s in spans]
    waits = [(now - since).total_seconds() for since in sinces]
    steady += [_span_steady_for(s, rising=s >= 0) for s in waits]
    return now + timedelta(seconds=min(steady)) if steady else None


@register.filter
def phrase_html(text: Any) -> Any:
    """`text` as a page shows it, ready for a string filter after it (`capfirst`): a Phrase in
    the reader's language with its names kept as written (safe HTML), where the filter would
    otherwise read its English; any other value as it is."""
    return conditional_escape(text) if isinstance(text, Phrase) else text


@register.filter
def time_left(due: datetime | None) -> str:
    """`42 min left`, or `overdue 3 min` once the timeout has passed."""
    if due is None:
        return ""
    seconds = (due - timezone.now()).total_seconds()
    if seconds >= 0:
        return _("%(span)s left") % {"span": _span(seconds)}
    return _("overdue %(span)s") % {"span": _span(seconds)}


@register.filter
def overdue(due: datetime | None) -> bool:
    return due is not None and due < timezone.now()


@register.filter
def waited(since: datetime | None) -> str:
    """`waiting 12 min`: how long ago `since` was."""
    if since is None:
        return ""
    return _("waiting %(span)s") % {"span": _span((timezone.now() - since).total_seconds())}


# One implementation of each shared filter (agentops owns them; reviews templates use them too).
register.filter("gate_money", agentops_tags.gate_money)
register.filter("stamp", agentops_tags.stamp)
register.filter("failure_label", agentops_tags.failure_label)
register.filter("event_label", agentops_tags.event_label)
# A gate's "1 of 2" (None for a gate one approval closes): the inbox row and the gate panel.
register.filter("gate_approvals", gate_approval_progress)


@register.filter
def json_line(value: Any, limit: int = 200) -> str:
    """A stored JSON value on one line, length-capped; artifacts by their pointer."""
    return json_preview(value, limit=int(limit))


@register.filter
def repair_change(change: dict[str, Any]) -> str:
    """One line of a plan repair's diff, as a person reads it."""
    return change_text(change)


@register.filter
def action_label(action: str) -> str:
    """`reviews.gate.approved` → `gate approved` (the stored name stays in the title)."""
    parts = action.split(".")
    return " ".join(parts[1:]).replace("_", " ") if len(parts) > 1 else action


@register.filter
def answer_of(answers: dict[str, Any], key: str) -> Any:
    """A rubric review's answer to the item `key`, or an em dash for an item left out."""
    value = answers.get(key) if isinstance(answers, dict) else None
    return "—" if value is None else value


@register.filter
def held_now(item: Any) -> Any:
    """The audit item's reservation while it is in force, else None (it has expired: the item
    is back in the queue)."""
    return reservation_in_force(item)
