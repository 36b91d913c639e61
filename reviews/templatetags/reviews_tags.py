"""Template helpers of the review workspace: time left before a gate times out, how long an item
has waited, a decision's action and a notice in the reader's language. Filters return plain
strings (autoescaped by the template like any other value), or safe HTML whose record values are
kept as written (`translate="no"`).

The review section of the task page is `reviews.task_page`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy

from agentops.engine import change_text
from agentops.selectors import json_preview
from agentops.templatetags import agentops_tags
from policies.phrases import Phrase, kept
from reviews.notice_text import headline
from reviews.selectors.approvals import gate_approval_progress
from reviews.selectors.audit import reservation_in_force

if TYPE_CHECKING:
    from reviews.models import Notice

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


# The decision log's actions as a person reads them: whole labels, so each language words them
# its own way (the stored name stays on the page, in the row's `data-action`).
ACTION_LABELS = {
    "reviews.gate.approved": pgettext_lazy("decision", "gate approved"),
    "reviews.gate.edited": pgettext_lazy("decision", "gate edited"),
    "reviews.gate.rejected": pgettext_lazy("decision", "gate rejected"),
    "reviews.gate.rejected_and_stopped": pgettext_lazy("decision", "gate rejected and stopped"),
    "reviews.gate.expired": pgettext_lazy("decision", "gate expired"),
    "reviews.gate.escalated": pgettext_lazy("decision", "gate escalated"),
    "reviews.intervention.retry": pgettext_lazy("decision", "intervention retry"),
    "reviews.intervention.skip": pgettext_lazy("decision", "intervention skip"),
    "reviews.intervention.rollback": pgettext_lazy("decision", "intervention rollback"),
    "reviews.intervention.abort": pgettext_lazy("decision", "intervention abort"),
    "reviews.plan.repaired": pgettext_lazy("decision", "plan repaired"),
    "reviews.ledger.confirmed": pgettext_lazy("decision", "ledger confirmed"),
    "reviews.scope.granted": pgettext_lazy("decision", "scope granted"),
    "reviews.scope.revoked": pgettext_lazy("decision", "scope revoked"),
    "reviews.question.answered": pgettext_lazy("decision", "question answered"),
    "reviews.task.paused": pgettext_lazy("decision", "task paused"),
    "reviews.task.resumed": pgettext_lazy("decision", "task resumed"),
    "reviews.task.cancelled": pgettext_lazy("decision", "task cancelled"),
    "reviews.task.modified": pgettext_lazy("decision", "task modified"),
    "reviews.task.restored": pgettext_lazy("decision", "task restored"),
    "reviews.task.escalated": pgettext_lazy("decision", "task escalated"),
    "reviews.task.restarted": pgettext_lazy("decision", "task restarted"),
    "reviews.task.forked": pgettext_lazy("decision", "task forked"),
    "reviews.fleet.stopped": pgettext_lazy("decision", "fleet stopped"),
    "reviews.fleet.resumed": pgettext_lazy("decision", "fleet resumed"),
    "reviews.claim.assigned": pgettext_lazy("decision", "claim assigned"),
    "reviews.claim.taken_over": pgettext_lazy("decision", "claim taken over"),
    "reviews.audit.ok": pgettext_lazy("decision", "audit ok"),
    "reviews.audit.flagged": pgettext_lazy("decision", "audit flagged"),
    "reviews.rubric.answered": pgettext_lazy("decision", "rubric answered"),
    "reviews.rubric.adjudicated": pgettext_lazy("decision", "rubric adjudicated"),
    "reviews.rubric.created": pgettext_lazy("decision", "rubric created"),
    "reviews.rubric.attached": pgettext_lazy("decision", "rubric attached"),
    "reviews.reservation.taken": pgettext_lazy("decision", "reservation taken"),
    "reviews.reservation.released": pgettext_lazy("decision", "reservation released"),
    "reviews.retention.erased": pgettext_lazy("decision", "retention erased"),
    "policies.version.published": pgettext_lazy("decision", "version published"),
    "policies.version.reverted": pgettext_lazy("decision", "version reverted"),
}


@register.filter
def action_label(action: str) -> str:
    """`reviews.gate.approved` → `gate approved`, in the reader's language. An action without a
    label (a newer one) reads as its name made readable, kept as written."""
    label = ACTION_LABELS.get(action)
    if label is not None:
        return str(label)
    parts = action.split(".")
    name = " ".join(parts[1:]).replace("_", " ") if len(parts) > 1 else action
    return kept(name)


@register.filter
def notice_headline(notice: Notice) -> str:
    """What a notice announced, as its email's subject says it, in the reader's language (the
    stored `text` is the English record of it)."""
    return headline(notice)


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
