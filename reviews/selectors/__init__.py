"""Reads behind the review workspace: the inbox, the gate and recovery panels, the audit queue and
the decision log.

Each selector runs a fixed number of queries whatever the number of steps, ledger rows or items
(explicit select_related/prefetch_related), so a panel costs the same at step 2 and at step 200
and the polled inbox costs the same with 3 items and with 300 (it reads one page of them).
Values from the task, the model and the tools are returned as data or plain strings; templates
autoescape them.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import connection
from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, QuerySet, Value, When
from django.utils import timezone

from agentops.engine.advisor import LedgerView, Preview, StepView, preview
from agentops.engine.errors import UnknownTool
from agentops.engine.jsonvalues import is_pointer, loaded
from agentops.engine.registry import get_tool
from agentops.models import AuditItem, Event, Gate, Step, Task, ToolCall
from agentops.paging import Window, window
from agentops.selectors import (
    Recovery,
    StepRow,
    TaskDetail,
    ToolFacts,
    json_preview,
    mark_compensated,
    step_row,
    task_get_detail,
    tool_facts,
)
from agentops.states import TASK_TRANSITIONS, AuditStatus, GateStatus, LedgerStatus, TaskStatus
from policies.models import PolicyChange
from reviews.models import ApiToken, Claim, Decision, Delivery
from reviews.roles import gate_decider_refusal
from reviews.states import DecisionChannel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

INBOX_PAGE_SIZE = 50
AUDIT_PAGE_SIZE = 50
LOG_LIMIT = 200
TASK_LOG_LIMIT = 50
PREVIEW_CHARS = 240
# Policy changes that count as human decisions in the log (draft edits do not).
POLICY_DECISIONS = ("policies.version.published", "policies.version.reverted")


def pretty_json(value: Any) -> str:
    """Stored JSON as an indented, key-sorted block (the canonical record, not the model's text)."""
    if is_pointer(value):
        return json_preview(value)
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _holder(task: Task) -> User | None:
    """The user holding the task's inbox item, from a select_related claim (None: nobody)."""
    try:
        return task.claim.user
    except Claim.DoesNotExist:
        return None


# -- navigation counts ---------------------------------------------------------------------------


def inbox_counts() -> tuple[int, int]:
    """Open gates and stopped tasks: what waits for an operator now (two queries)."""
    return (
        Gate.objects.filter(status=GateStatus.OPEN).count(),
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION).count(),
    )


def audit_pending_count() -> int:
    return AuditItem.objects.filter(status=AuditStatus.PENDING).count()


# -- inbox -------------------------------------------------------------------------------------


# A stopped task waits for a person too: it is due this long after it stopped (its SLA), and
# then it is shown overdue at the top of "due first" (the timeout action is to escalate).
def stopped_sla_seconds() -> float:
    """AGENTOPS_STOPPED_SLA_SECONDS (default 4 hours)."""
    return float(settings.AGENTOPS["STOPPED_SLA_SECONDS"])


STOPPED_TIMEOUT_ACTION = "escalate to operators"
AGES = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "1d": timedelta(days=1)}


@dataclass(frozen=True)
class InboxItem:
    """One thing that waits for a person: an open gate, or a task stopped in needs_attention.

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
            InboxItem("gate", gate.task, gate, gate.due_at, _holder(gate.task)) for gate in gates
        ] + [
            InboxItem(
                "stopped",
                task,
                None,
                task.status_changed_at,
                _holder(task),
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


# -- shared rows of the panels -----------------------------------------------------------------


# -- gate panel --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffRow:
    """One argument before (as proposed) and after (as approved)."""

    key: str
    before: str
    after: str
    change: str  # same | changed | added | removed


def args_diff(before: Any, after: Any) -> list[DiffRow]:
    """A readable before/after of two argument objects, key by key (sorted)."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    rows = []
    for key in sorted(set(before) | set(after)):
        old = json.dumps(before[key], ensure_ascii=False, sort_keys=True) if key in before else ""
        new = json.dumps(after[key], ensure_ascii=False, sort_keys=True) if key in after else ""
        if key not in before:
            change = "added"
        elif key not in after:
            change = "removed"
        else:
            change = "same" if before[key] == after[key] else "changed"
        rows.append(DiffRow(str(key), old, new, change))
    return rows


@dataclass(frozen=True)
class CheckResult:
    """One piece of gate evidence: a tool's check of the arguments against earlier results."""

    label: str
    passed: bool
    detail: str


def _result_read(result: Any) -> Any:
    """A recorded result for the checks: an artifact's content, or the pointer as stored when
    the artifact cannot be read (its file lost or changed, its row gone): the checks then judge
    what is there instead of the panel failing."""
    try:
        return loaded(result)
    except (ObjectDoesNotExist, TypeError, ValueError, OSError):
        return result


def gate_checks(gate: Gate, calls: Sequence[ToolCall]) -> list[CheckResult]:
    """Run the gated tool's declared checks against the task's earlier results, from the ledger
    rows the panel loaded (no query of its own). A check that raises reads as failed, with why."""
    try:
        tool = get_tool(gate.tool)
    except UnknownTool:
        return []
    if not tool.checks:
        return []
    results: dict[str, Any] = {}
    for call in calls:
        if call.status == LedgerStatus.SUCCEEDED and call.compensation_of_id is None:
            results[call.tool] = _result_read(call.result)
    arguments = gate.approved_arguments if gate.approved_arguments is not None else gate.arguments
    checked = []
    for label, check in tool.checks:
        try:
            passed, detail = check(arguments, results)
        # An agent's check is agent code run on recorded data: one that raises is shown as a
        # failed check with its error, never hidden and never breaking the panel.
        except Exception as exc:
            passed, detail = False, f"the check could not run: {exc}"
        checked.append(CheckResult(label, bool(passed), str(detail)))
    return checked


@dataclass(frozen=True)
class GatePanel:
    gate: Gate
    task: Task
    steps: list[StepRow]
    calls: Sequence[ToolCall]
    arguments_json: str
    tool: ToolFacts
    holder: User | None
    # Once approved: what was approved, the diff against the proposal, and the ledger row that
    # ran it (None until the worker recorded it).
    approved_json: str = ""
    diff: list[DiffRow] | None = None
    executed: ToolCall | None = None
    executed_json: str = ""
    # What "reject and stop" would do: abort keeps the effects, rollback undoes them.
    stop_previews: dict[str, Preview] | None = None
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def position(self) -> int:
        return self.gate.step.ordinal + 1

    @property
    def is_open(self) -> bool:
        return self.gate.status == GateStatus.OPEN

    @property
    def changed(self) -> bool:
        return bool(self.diff) and any(row.change != "same" for row in self.diff or [])


def _stop_previews(calls: Sequence[ToolCall], steps: list[Step]) -> dict[str, Preview]:
    ledger = []
    for call in calls:
        facts = tool_facts(call.tool, recorded_side_effect=call.side_effect)
        ledger.append(
            LedgerView(
                key=call.idempotency_key,
                tool=call.tool,
                status=call.status,
                side_effect=facts.side_effect,
                compensable=facts.compensate_with is not None,
                compensates=None
                if call.compensation_of_id is None
                else str(call.compensation_of_id),
            )
        )
    views = [StepView(s.ordinal, s.title, s.status) for s in steps]
    return {option: preview(option, views, ledger) for option in ("abort", "rollback")}


def gate_get_panel(*, gate_id: int) -> GatePanel:
    """A gate with its task, the task's steps and ledger rows, in three queries (four once
    approved: the ledger row that ran the approved arguments).

    Raises Gate.DoesNotExist for an unknown id.
    """
    gate = Gate.objects.select_related(
        "task", "task__created_by", "task__claim__user", "step", "decided_by"
    ).get(pk=gate_id)
    steps = list(Step.objects.filter(task_id=gate.task_id).order_by("ordinal"))
    # Results come along (not args): the tool's evidence checks read them.
    calls = list(
        ToolCall.objects.filter(task_id=gate.task_id)
        .defer("args")
        .annotate(step_ordinal=F("step__ordinal"))
        .order_by("id")
    )
    mark_compensated(steps, calls)
    approved_json, diff, executed, executed_json = "", None, None, ""
    if gate.status == GateStatus.APPROVED and gate.approved_arguments is not None:
        approved_json = pretty_json(gate.approved_arguments)
        diff = args_diff(gate.arguments, gate.approved_arguments)
        executed = (
            ToolCall.objects.filter(
                step_id=gate.step_id,
                compensation_of__isnull=True,
                args_digest=gate.approved_digest,
            )
            .order_by("-id")
            .first()
        )
        executed_json = pretty_json(executed.args) if executed is not None else ""
    return GatePanel(
        gate=gate,
        task=gate.task,
        steps=[step_row(s, limit=PREVIEW_CHARS) for s in steps],
        calls=calls,
        arguments_json=pretty_json(gate.arguments),
        tool=tool_facts(gate.tool, recorded_side_effect=gate.side_effect),
        holder=_holder(gate.task),
        approved_json=approved_json,
        diff=diff,
        executed=executed,
        executed_json=executed_json,
        stop_previews=_stop_previews(calls, steps) if gate.status == GateStatus.OPEN else None,
        checks=gate_checks(gate, calls),
    )


# -- recovery panel ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionView:
    action: str
    preview: Preview
    recommended: bool


@dataclass(frozen=True)
class UnknownCall:
    """An `executed_unknown` call: the call as recorded, and the ledger events of its key."""

    call: ToolCall
    arguments_json: str
    history: list[Event]


@dataclass(frozen=True)
class InterventionLine:
    """An earlier human decision on the stopped task, with what happened after it."""

    decision: Decision
    outcome: str


@dataclass(frozen=True)
class RecoveryPanel:
    detail: TaskDetail
    recovery: Recovery | None
    options: list[OptionView]
    unknown_calls: list[UnknownCall]
    exchanges: list[tuple[Step, str]]
    holder: User | None
    interventions: list[InterventionLine] = field(default_factory=list)
    open_gate_id: int | None = None

    @property
    def task(self) -> Task:
        return self.detail.task

    @property
    def failure(self) -> dict[str, Any]:
        failure = self.detail.task.failure
        return failure if isinstance(failure, dict) else {}


def task_get_recovery_panel(*, task_id: int, viewer: User) -> RecoveryPanel:
    """A stopped task with the advisor's recommendation, a preview of each option, its unknown
    calls with their ledger history, and the details folded below; seven queries at most.

    Raises Task.DoesNotExist for an unknown id. `recovery` is None when the task is not stopped.
    """
    detail = task_get_detail(task_id=task_id, viewer=viewer)
    recovery = detail.recovery
    options = []
    if recovery is not None:
        options = [
            OptionView(str(action), recovery.previews[str(action)], index == 0)
            for index, action in enumerate(recovery.recommendation.options)
            if str(action) in recovery.previews
        ]
    unknown = list(
        ToolCall.objects.filter(task_id=task_id, status=LedgerStatus.EXECUTED_UNKNOWN).order_by(
            "id"
        )
    )
    history: dict[str, list[Event]] = {}
    if unknown:
        keys = [call.idempotency_key for call in unknown]
        for event in Event.objects.filter(task_id=task_id, payload__key__in=keys).order_by("seq"):
            history.setdefault(event.payload.get("key"), []).append(event)
    exchanges = [
        (row.step, json_preview(row.step.model_response, limit=2000))
        for row in detail.steps
        if row.step.model_response
    ]
    claim = Claim.objects.filter(task_id=task_id).select_related("user").first()
    decisions = list(
        Decision.objects.filter(
            task_id_ref=task_id, action__startswith="reviews.intervention."
        ).order_by("created_at", "id")[:TASK_LOG_LIMIT]
    )
    events = sorted((row.event for row in detail.events), key=lambda e: e.seq)
    interventions = [InterventionLine(d, _outcome_after(d, events)) for d in reversed(decisions)]
    return RecoveryPanel(
        detail=detail,
        recovery=recovery,
        options=options,
        unknown_calls=[
            UnknownCall(call, pretty_json(call.args), history.get(call.idempotency_key, []))
            for call in unknown
        ],
        exchanges=exchanges,
        holder=claim.user if claim else None,
        interventions=interventions,
        open_gate_id=task_open_gate_id(task_id=task_id)
        if detail.task.status == TaskStatus.AWAITING_APPROVAL
        else None,
    )


def _outcome_after(decision: Decision, events: list[Event]) -> str:
    """What followed an intervention: the next step failure, success, or nothing yet."""
    for event in events:
        if event.created_at < decision.created_at:
            continue
        if event.action == "agentops.step.failed":
            kind = ((event.payload or {}).get("failure") or {}).get("kind", "error")
            return f"failed again: {str(kind).replace('_', ' ')}"
        if event.action in ("agentops.task.succeeded", "agentops.task.rolled_back"):
            return event.action.rsplit(".", 1)[1].replace("_", " ")
    return "no outcome yet"


# -- audit queue -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditFilters:
    agent: str = ""
    tool: str = ""
    rule: str = ""
    route: str = ""
    status: str = ""
    date_from: date | None = None
    date_to: date | None = None


def _audit_items(filters: AuditFilters) -> QuerySet[AuditItem]:
    queryset = AuditItem.objects.select_related("task", "tool_call", "reviewed_by")
    exact = {
        "agent": filters.agent,
        "tool": filters.tool,
        "rule": filters.rule,
        "route": filters.route,
        "status": filters.status,
    }
    queryset = queryset.filter(**{field: value for field, value in exact.items() if value})
    if filters.date_from:
        queryset = queryset.filter(created_at__date__gte=filters.date_from)
    if filters.date_to:
        queryset = queryset.filter(created_at__date__lte=filters.date_to)
    return queryset


def audit_item_list(*, filters: AuditFilters) -> QuerySet[AuditItem]:
    """Audit items matching `filters`: items to review first, then newest first (the export;
    the queue reads pages of the same order with audit_item_page)."""
    return (
        _audit_items(filters)
        .annotate(
            pending_first=Case(
                When(status=AuditStatus.PENDING, then=Value(0)),
                default=Value(1),
                output_field=IntegerField(),
            )
        )
        .order_by("pending_first", "-created_at", "-id")
    )


def audit_item_page(
    *, filters: AuditFilters, page: Any = 1, size: int = AUDIT_PAGE_SIZE
) -> Window[AuditItem]:
    """One page of audit items in the order of audit_item_list, read as two index-ordered lists
    (items to review, newest first, then the reviewed ones, newest first; an index serves
    each), so a page costs the same with 100 and with 1,000,000 items. Counts nothing
    unless the page starts past the end of the items to review (then it counts those)."""
    matching = _audit_items(filters)
    pending = matching.filter(status=AuditStatus.PENDING).order_by("-created_at", "-id")
    reviewed = matching.exclude(status=AuditStatus.PENDING).order_by("-created_at", "-id")

    def rows(offset: int, limit: int) -> list[AuditItem]:
        first = list(pending[offset : offset + limit])
        if len(first) == limit:
            return first
        pending_total = offset + len(first) if first else pending.count()
        start = max(0, offset - pending_total)
        return first + list(reviewed[start : start + limit - len(first)])

    return window(rows, page=page, size=size)


def audit_item_get(*, item_id: int) -> AuditItem:
    """One audit item with its context. Raises AuditItem.DoesNotExist."""
    return AuditItem.objects.select_related("task", "tool_call", "reviewed_by").get(pk=item_id)


def audit_filter_choices() -> dict[str, list[str]]:
    """The agents, tools and rules that occur in the queue, for the filter menus (one query).

    A `DISTINCT` would read every audit item on every page of the queue; this walks the
    (agent, tool, rule) index instead, one probe per distinct triple (a loose index scan),
    so it costs the same with 1,000 and with 1,000,000 items."""
    table = connection.ops.quote_name(AuditItem._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH RECURSIVE seen(agent, tool, rule) AS (
                (SELECT agent, tool, rule FROM {table} ORDER BY agent, tool, rule LIMIT 1)
                UNION ALL
                SELECT later.agent, later.tool, later.rule
                FROM seen, LATERAL (
                    SELECT agent, tool, rule FROM {table}
                    WHERE (agent, tool, rule) > (seen.agent, seen.tool, seen.rule)
                    ORDER BY agent, tool, rule LIMIT 1
                ) AS later
            )
            SELECT agent, tool, rule FROM seen
            """
        )
        rows = cursor.fetchall()
    agents, tools, rules = set(), set(), set()
    for agent, tool, rule in rows:
        agents.add(agent)
        tools.add(tool)
        rules.add(rule)
    return {"agent": sorted(agents), "tool": sorted(tools), "rule": sorted(rules)}


# -- decision log ------------------------------------------------------------------------------


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
    # How the decision came in (`DecisionChannel`); blank for policy publishes and reverts, which
    # `policies` records without one.
    channel: str = ""
    # For an API decision: the token's prefix and id (`ab12cd34 (#7)`; `#7` once the row is gone).
    api_token: str = ""

    @property
    def channel_label(self) -> str:
        if not self.channel:
            return ""
        label = DecisionChannel(self.channel).label
        return f"{label}, token {self.api_token}" if self.api_token else label


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
    newest_first = ("-created_at", "-id")
    return (
        decisions.order_by(*newest_first),
        changes.order_by(*newest_first) if filters.task_id is None else None,
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

    Both tables are read through server-side cursors `chunk_size` rows at a time and merged by
    time as they stream, so memory stays flat however long the log is."""
    decisions, changes = _decision_log_querysets(filters)
    streams = [(_decision_entry(d) for d in decisions.iterator(chunk_size=chunk_size))]
    if changes is not None:
        streams.append(_policy_entry(c) for c in changes.iterator(chunk_size=chunk_size))
    return heapq.merge(*streams, key=lambda e: e.created_at, reverse=True)


def decision_list_for_task(*, task_id: int, limit: int = TASK_LOG_LIMIT) -> list[Decision]:
    return list(Decision.objects.filter(task_id_ref=task_id).order_by("-created_at", "-id")[:limit])


def task_exists(*, task_id: int) -> bool:
    return Task.objects.filter(pk=task_id).exists()


def task_open_gate_id(*, task_id: int) -> int | None:
    return (
        Gate.objects.filter(task_id=task_id, status=GateStatus.OPEN)
        .values_list("pk", flat=True)
        .first()
    )


def task_controls_for(status: str) -> list[str]:
    """Pause / resume / cancel offered for a task in `status`, from the transition table."""
    controls = []
    if status in TASK_TRANSITIONS["pause"].sources:
        controls.append("pause")
    if status == TaskStatus.PAUSED:
        controls.append("resume")
    if status in TASK_TRANSITIONS["abort"].sources:
        controls.append("cancel")
    return controls


def api_token_list(*, user: User) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=user))


def delivery_list_for(*, user: User, limit: int = 20) -> list[Delivery]:
    """The latest notifications sent (or being sent) to `user`."""
    return list(Delivery.objects.filter(user=user).select_related("notice")[:limit])
