"""The inbox: open gates and stopped tasks, one page at a time, with their filters, counts and the
stopped-task SLA. The polled inbox runs a fixed number of queries whatever the number of items.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from agentops.engine import (
    Choice,
    QuestionView,
    approval_kind_of,
    approval_kinds_offering,
    question_of,
)
from agentops.models import AuditItem, Gate, Task, ToolCall
from agentops.plumbing.paging import Window, window
from agentops.states import AuditStatus, GateStatus, LedgerStatus, TaskStatus
from reviews.models import InboxChanges
from reviews.roles import gate_decider_refusal
from reviews.selectors._common import holder_of

if TYPE_CHECKING:
    from django.contrib.auth.models import User

INBOX_PAGE_SIZE = 50


def inbox_counts() -> tuple[int, int]:
    """Open gates and stopped tasks: what waits for an operator now (two queries)."""
    return (
        Gate.objects.filter(status=GateStatus.OPEN).count(),
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION).count(),
    )


def inbox_state() -> str:
    """The inbox's version as the database counts it: the sum of `InboxChanges`, which a trigger
    moves in the same transaction as any change to what the inbox can show, for every viewer
    and filter (open gates and their tasks, stopped tasks, who holds each, a call of unknown
    outcome, the operators an item can be assigned to; migration reviews 0019). One statement
    over a few rows, whatever the number of tasks or waiting items. (The relative times the rows
    print are not in it: the inbox poll's version expires when the first of them would change,
    `reviews_tags.times_steady_until`.)"""
    total = InboxChanges.objects.aggregate(total=Sum("changes"))["total"]
    return str(total or 0)


def audit_pending_count() -> int:
    return AuditItem.objects.filter(status=AuditStatus.PENDING).count()


# A stopped task waits for a person too: it is due this long after it stopped (its SLA), and
# then it is shown overdue at the top of "due first" (the timeout action is to escalate).
def stopped_sla_seconds() -> float:
    """AGENTOPS_STOPPED_SLA_SECONDS (default 4 hours)."""
    return float(settings.AGENTOPS["STOPPED_SLA_SECONDS"])


STOPPED_TIMEOUT_ACTION = "escalate to operators"

AGES = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "1d": timedelta(days=1)}


@dataclass(frozen=True)
class InboxItem:
    """One thing that waits for a person: an open gate (`kind` "gate"), an agent's question (an
    open gate of the question kind, "question"), or a task stopped in needs_attention ("stopped").

    `due_at` orders the inbox: the gate's timeout, or for a stopped task the time it stopped.
    `since` is when it started waiting; `deadline` is when it is due (a gate's timeout, a stopped
    task's SLA) and `timeout_action` what happens then. `decidable`: the viewer may decide it
    (a gate of a task they started is not theirs to decide).
    """

    kind: str
    task: Task
    gate: Gate | None
    due_at: datetime
    holder: User | None
    unknown_call: bool = False
    decidable: bool = True

    @property
    def dom_id(self) -> str:
        return f"gate-{self.gate.pk}" if self.gate is not None else f"task-{self.task.pk}"

    @property
    def sort_key(self) -> tuple[datetime, int, int]:
        return (self.due_at, 0 if self.gate is None else 1, self.gate.pk if self.gate else 0)

    @property
    def since(self) -> datetime:
        return self.gate.created_at if self.gate is not None else self.task.status_changed_at

    @property
    def deadline(self) -> datetime:
        if self.gate is not None:
            return self.gate.due_at
        return self.task.status_changed_at + timedelta(seconds=stopped_sla_seconds())

    @property
    def timeout_action(self) -> str:
        if self.gate is not None:
            action = self.gate.timeout_action
            return f"{action} to {self.gate.escalate_to}" if self.gate.escalate_to else action
        return STOPPED_TIMEOUT_ACTION

    @property
    def question(self) -> QuestionView | None:
        """What the agent asked, for a question."""
        return question_of(self.gate.arguments) if self.kind == "question" and self.gate else None

    @property
    def failure_kind(self) -> str:
        failure = self.task.failure if isinstance(self.task.failure, dict) else {}
        return str(failure.get("kind") or "").replace("_", " ")


@dataclass(frozen=True)
class Inbox:
    """A page of what waits (`items`, and the `page` window), with the counts of all of it."""

    items: list[InboxItem]
    gate_count: int
    stopped_count: int
    page: Window[InboxItem]


@dataclass(frozen=True)
class InboxFilters:
    kind: str = ""
    agent: str = ""
    rule: str = ""
    failure: str = ""
    assignee: str = ""
    age: str = ""
    q: str = ""
    sort: str = "due"
    mine: bool = False

    @property
    def active(self) -> bool:
        return (
            any((self.kind, self.agent, self.rule, self.failure, self.assignee, self.age, self.q))
            or self.mine
        )


def _search(q: str) -> Q:
    digits = q.lstrip("#")
    if digits.isdigit():
        return Q(task_id=int(digits)) | Q(task__goal__icontains=q)
    return Q(task__goal__icontains=q)


def _inbox_querysets(
    filters: InboxFilters, viewer: User | None
) -> tuple[QuerySet[Gate], QuerySet[Task]]:
    """Open gates and stopped tasks narrowed by `filters`, unordered."""
    now = timezone.now()
    gates_qs = Gate.objects.filter(status=GateStatus.OPEN)
    tasks_qs = Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
    if filters.agent:
        gates_qs = gates_qs.filter(task__agent=filters.agent)
        tasks_qs = tasks_qs.filter(agent=filters.agent)
    if filters.rule:
        gates_qs = gates_qs.filter(rule=filters.rule)
        tasks_qs = tasks_qs.none()
    if filters.failure:
        gates_qs = gates_qs.none()
        tasks_qs = tasks_qs.filter(failure__kind=filters.failure)
    if filters.kind == "gate":
        gates_qs = gates_qs.exclude(approval_kind__in=approval_kinds_offering(Choice.ANSWER))
        tasks_qs = tasks_qs.none()
    elif filters.kind == "question":
        gates_qs = gates_qs.filter(approval_kind__in=approval_kinds_offering(Choice.ANSWER))
        tasks_qs = tasks_qs.none()
    elif filters.kind == "stopped":
        gates_qs = gates_qs.none()
    if filters.mine and viewer is not None:
        gates_qs = gates_qs.filter(task__claim__user=viewer.pk)
        tasks_qs = tasks_qs.filter(claim__user=viewer.pk)
    if filters.assignee:
        gates_qs = gates_qs.filter(task__claim__user__username__iexact=filters.assignee)
        tasks_qs = tasks_qs.filter(claim__user__username__iexact=filters.assignee)
    if filters.age in AGES:
        cutoff = now - AGES[filters.age]
        gates_qs = gates_qs.filter(created_at__lte=cutoff)
        tasks_qs = tasks_qs.filter(status_changed_at__lte=cutoff)
    if filters.q:
        gates_qs = gates_qs.filter(_search(filters.q))
        digits = filters.q.lstrip("#")
        task_q = Q(goal__icontains=filters.q)
        if digits.isdigit():
            task_q |= Q(pk=int(digits))
        tasks_qs = tasks_qs.filter(task_q)
    return gates_qs, tasks_qs


# The database order of each list that agrees with the inbox order of a sort (see inbox_list).
INBOX_ORDER = {
    "due": (("due_at", "id"), ("status_changed_at", "id")),
    "waiting": (("created_at", "task_id"), ("status_changed_at", "id")),
    "newest": (("-created_at", "-task_id"), ("-status_changed_at", "-id")),
}


def inbox_list(
    *,
    filters: InboxFilters | None = None,
    viewer: User | None = None,
    page: Any = 1,
    size: int = INBOX_PAGE_SIZE,
) -> Inbox:
    """One page of open gates and stopped tasks in one stable order: due time, then stopped
    before gated, then id. Times never change while an item waits, so an item keeps its place
    and a new one lands in its slot by time. `filters` narrow the lists in the database; `sort`
    "waiting" puts the longest-waiting first, "newest" the newest.

    Each list is read in the database in an order that agrees with the inbox order, only as
    far as the page reaches (offset + size + 1 rows of each: the merged page can hold no row
    beyond that), and counted; indexes on what waits (open gates by due time, a partial one
    on stopped tasks) keep both independent of the number of tasks. Five queries (four with
    no viewer or no gate on the page)."""
    filters = filters or InboxFilters()
    gates_qs, tasks_qs = _inbox_querysets(filters, viewer)
    gate_order, task_order = INBOX_ORDER.get(filters.sort, INBOX_ORDER["due"])
    gate_count, stopped_count = gates_qs.count(), tasks_qs.count()

    def rows(offset: int, limit: int) -> list[InboxItem]:
        reach = offset + limit
        gates = list(
            # The row shows the gate, its task and who holds it: not the step, whose model
            # response and output are the biggest JSON values of all.
            gates_qs.select_related("task", "task__claim__user").order_by(*gate_order)[:reach]
        )
        stopped = list(
            tasks_qs.select_related("claim__user")
            .annotate(
                unknown_call=Exists(
                    ToolCall.objects.filter(
                        task=OuterRef("pk"), status=LedgerStatus.EXECUTED_UNKNOWN
                    )
                )
            )
            .order_by(*task_order)[:reach]
        )
        items = [
            InboxItem(
                "question" if approval_kind_of(gate).takes_answer else "gate",
                gate.task,
                gate,
                gate.due_at,
                holder_of(gate.task),
            )
            for gate in gates
        ] + [
            InboxItem(
                "stopped",
                task,
                None,
                task.status_changed_at,
                holder_of(task),
                unknown_call=task.unknown_call,
            )
            for task in stopped
        ]
        items.sort(key=lambda item: (item.sort_key, item.task.pk))
        if filters.sort == "waiting":
            items.sort(key=lambda item: (item.since, item.task.pk))
        elif filters.sort == "newest":
            items.sort(key=lambda item: (item.since, item.task.pk), reverse=True)
        shown = items[offset:reach]
        if viewer is not None:
            shown = [
                replace(item, decidable=gate_decider_refusal(item.gate, viewer) is None)
                if item.gate is not None
                else item
                for item in shown
            ]
        return shown

    items = window(rows, page=page, size=size, count=gate_count + stopped_count)
    return Inbox(items.object_list, gate_count, stopped_count, items)


def inbox_filter_choices() -> dict[str, list[str]]:
    """Agents, rules and failure kinds of what waits now, for the filter menus (two queries)."""
    gate_rows = (
        Gate.objects.filter(status=GateStatus.OPEN)
        .order_by()
        .values_list("task__agent", "rule")
        .distinct()
    )
    task_rows = (
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
        .order_by()
        .values_list("agent", "failure__kind")
        .distinct()
    )
    agents, rules, kinds = set(), set(), set()
    for agent, rule in gate_rows:
        agents.add(agent)
        rules.add(rule)
    for agent, kind in task_rows:
        agents.add(agent)
        if kind:
            kinds.add(str(kind))
    return {"agent": sorted(agents), "rule": sorted(rules), "failure": sorted(kinds)}


def operators_list() -> list[User]:
    """People an item can be assigned to: active members of the operators group."""
    from django.contrib.auth import get_user_model

    return list(
        get_user_model()
        .objects.filter(is_active=True, groups__name="operators")
        .order_by("username")
        .distinct()
    )
