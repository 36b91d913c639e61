"""The decision log: review decisions merged with policy changes, newest first, as one page or as
an iterator in chunks for the CSV export (which never holds the whole log in memory).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from agentops.plumbing.paging import keyset_rows
from policies.models import PolicyChange
from reviews.channels import channel_label
from reviews.models import Decision
from reviews.selectors._common import TASK_LOG_LIMIT

if TYPE_CHECKING:
    pass

LOG_LIMIT = 200
NEWEST_FIRST = ("-created_at", "-id")


# Policy changes that count as human decisions in the log (draft edits do not).
POLICY_DECISIONS = ("policies.version.published", "policies.version.reverted")


@dataclass(frozen=True)
class DecisionFilters:
    action: str = ""
    user: str = ""
    task_id: int | None = None
    date_from: date | None = None
    date_to: date | None = None


@dataclass(frozen=True)
class LogEntry:
    """One row of the decision log: a reviews Decision, or a policy publish/revert."""

    source: str
    created_at: datetime
    action: str
    actor_label: str
    task_id: int | None
    subject: str
    before_digest: str
    after_digest: str
    reason: str
    policy_version_number: int | None
    # How the decision came in (a `DecisionChannel` or a registered channel's name); blank for
    # policy publishes and reverts, which `policies` records without one.
    channel: str = ""
    # For an API decision: the token's prefix and id (`ab12cd34 (#7)`; `#7` once the row is gone).
    api_token: str = ""

    @property
    def channel_label(self) -> str:
        if not self.channel:
            return ""
        label = channel_label(self.channel)
        if self.api_token:
            return _("%(channel)s, token %(token)s") % {"channel": label, "token": self.api_token}
        return label


def _action_q(action: str) -> Q:
    # "reviews.gate" selects the whole family; a full name selects one action.
    if action.count(".") >= 2:
        return Q(action=action)
    return Q(action__startswith=f"{action}.")


def _decision_entry(row: Decision) -> LogEntry:
    return LogEntry(
        source="decision",
        created_at=row.created_at,
        action=row.action,
        actor_label=row.actor_label,
        task_id=row.task_id_ref,
        subject=row.subject,
        before_digest=row.before_digest,
        after_digest=row.after_digest,
        reason=row.reason,
        policy_version_number=row.policy_version_number,
        channel=row.channel,
        api_token=_token_label(row),
    )


def _token_label(row: Decision) -> str:
    if row.api_token_id is None:
        return ""
    if row.api_token is None:
        return f"#{row.api_token_id}"
    return f"{row.api_token.prefix} (#{row.api_token_id})"


def _policy_entry(row: PolicyChange) -> LogEntry:
    detail = row.detail if isinstance(row.detail, dict) else {}
    number = row.version.number if row.version else detail.get("number")
    return LogEntry(
        source="policy",
        created_at=row.created_at,
        action=row.action,
        actor_label=row.actor_label or "system",
        task_id=None,
        subject=f"policy {row.policy.name} v{number}",
        before_digest="",
        after_digest="",
        reason=str(detail.get("change_note") or ""),
        policy_version_number=number,
    )


def _decision_log_querysets(
    filters: DecisionFilters,
) -> tuple[QuerySet[Decision], QuerySet[PolicyChange] | None]:
    """The decisions and the policy changes matching `filters`, newest first (None for the
    policy changes when a task filter leaves them out: they belong to no task)."""
    decisions = Decision.objects.select_related("api_token")
    changes = PolicyChange.objects.filter(action__in=POLICY_DECISIONS).select_related(
        "policy", "version"
    )
    if filters.action:
        decisions = decisions.filter(_action_q(filters.action))
        changes = changes.filter(_action_q(filters.action))
    if filters.user:
        decisions = decisions.filter(actor_label__iexact=filters.user)
        changes = changes.filter(actor_label__iexact=filters.user)
    if filters.date_from:
        decisions = decisions.filter(created_at__date__gte=filters.date_from)
        changes = changes.filter(created_at__date__gte=filters.date_from)
    if filters.date_to:
        decisions = decisions.filter(created_at__date__lte=filters.date_to)
        changes = changes.filter(created_at__date__lte=filters.date_to)
    if filters.task_id is not None:
        decisions = decisions.filter(task_id_ref=filters.task_id)
    return (
        decisions.order_by(*NEWEST_FIRST),
        changes.order_by(*NEWEST_FIRST) if filters.task_id is None else None,
    )


def decision_log_list(
    *, filters: DecisionFilters, limit: int = LOG_LIMIT
) -> tuple[list[LogEntry], bool]:
    """The newest `limit` decisions matching `filters`, newest first, and whether more exist.

    Policy publishes and reverts live in `policies.PolicyChange` (policies imports no other app,
    so it cannot write here); they are read from there and merged by time. Two queries.
    """
    decisions, changes = _decision_log_querysets(filters)
    entries = [_decision_entry(d) for d in decisions[: limit + 1]]
    if changes is not None:
        entries += [_policy_entry(c) for c in changes[: limit + 1]]
    entries.sort(key=lambda e: e.created_at, reverse=True)
    return entries[:limit], len(entries) > limit


def decision_log_iter(*, filters: DecisionFilters, chunk_size: int = 2000) -> Iterator[LogEntry]:
    """Every decision matching `filters`, newest first, with no cap: the export.

    Both tables are read `chunk_size` rows at a time (each read a query of its own, no
    server-side cursor) and merged by time as they stream, so memory stays flat however long
    the log is."""
    decisions, changes = _decision_log_querysets(filters)
    streams = [
        (_decision_entry(d) for d in keyset_rows(decisions, order=NEWEST_FIRST, size=chunk_size))
    ]
    if changes is not None:
        streams.append(
            _policy_entry(c) for c in keyset_rows(changes, order=NEWEST_FIRST, size=chunk_size)
        )
    return heapq.merge(*streams, key=lambda e: e.created_at, reverse=True)


def decision_list_for_task(*, task_id: int, limit: int = TASK_LOG_LIMIT) -> list[LogEntry]:
    """The task's latest decisions, as the decision log's rows (their channel named)."""
    rows = Decision.objects.filter(task_id_ref=task_id).select_related("api_token")
    return [_decision_entry(row) for row in rows.order_by("-created_at", "-id")[:limit]]
