"""Reads behind the review workspace: the inbox, the gate and recovery panels, the audit queue and
the decision log.

Each selector runs a fixed number of queries whatever the number of steps, ledger rows or items
(explicit select_related/prefetch_related), so a panel costs the same at step 2 and at step 200
and the polled inbox costs the same with 3 items and with 300. Values from the task, the model and
the tools are returned as data or plain strings; templates autoescape them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, QuerySet, Value, When

from agentops.engine.advisor import Preview
from agentops.engine.errors import UnknownTool
from agentops.engine.jsonvalues import is_pointer
from agentops.engine.registry import get_tool
from agentops.models import Event, Step, Task, ToolCall
from agentops.selectors import Recovery, TaskDetail, json_preview, task_get_detail
from agentops.states import LedgerStatus, TaskStatus
from policies.models import PolicyChange
from reviews.models import ApiToken, AuditItem, Claim, Decision, Delivery, Gate
from reviews.states import AuditStatus, GateStatus

INBOX_LIMIT = 300
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


def _holder(task: Task) -> Any:
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


@dataclass(frozen=True)
class InboxItem:
    """One thing that waits for a person: an open gate, or a task stopped in needs_attention.

    `due_at` is the gate's timeout, or for a stopped task the time it stopped (it is due now).
    """

    kind: str
    task: Task
    gate: Gate | None
    due_at: datetime
    holder: Any
    unknown_call: bool = False

    @property
    def dom_id(self) -> str:
        return f"gate-{self.gate.pk}" if self.gate is not None else f"task-{self.task.pk}"

    @property
    def sort_key(self) -> tuple[datetime, int, int]:
        return (self.due_at, 0 if self.gate is None else 1, self.gate.pk if self.gate else 0)

    @property
    def failure_kind(self) -> str:
        failure = self.task.failure if isinstance(self.task.failure, dict) else {}
        return str(failure.get("kind") or "").replace("_", " ")


@dataclass(frozen=True)
class Inbox:
    items: list[InboxItem]
    gate_count: int
    stopped_count: int
    truncated: bool


def inbox_list(*, limit: int = INBOX_LIMIT) -> Inbox:
    """Open gates and stopped tasks in one stable order: due time, then stopped before gated,
    then id. Times never change while an item waits, so an item keeps its place and a new one
    lands in its slot by time; two queries."""
    gates = list(
        Gate.objects.filter(status=GateStatus.OPEN)
        .select_related("task", "task__claim__user", "step")
        .order_by("due_at", "id")[: limit + 1]
    )
    stopped = list(
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
        .select_related("claim__user")
        .annotate(
            unknown_call=Exists(
                ToolCall.objects.filter(task=OuterRef("pk"), status=LedgerStatus.EXECUTED_UNKNOWN)
            )
        )
        .order_by("updated_at", "id")[: limit + 1]
    )
    truncated = len(gates) > limit or len(stopped) > limit
    gates, stopped = gates[:limit], stopped[:limit]
    items = [
        InboxItem("gate", gate.task, gate, gate.due_at, _holder(gate.task)) for gate in gates
    ] + [
        InboxItem(
            "stopped",
            task,
            None,
            task.updated_at,
            _holder(task),
            unknown_call=task.unknown_call,  # type: ignore[attr-defined]
        )
        for task in stopped
    ]
    items.sort(key=lambda item: (item.sort_key, item.task.pk))
    return Inbox(items, len(gates), len(stopped), truncated)


# -- shared rows of the panels -----------------------------------------------------------------


@dataclass(frozen=True)
class StepLine:
    step: Step
    output_preview: str
    model_text: str
    error: dict[str, Any] | None


def _step_line(step: Step) -> StepLine:
    response = step.model_response
    text = (
        response.get("text", "") if isinstance(response, dict) and not is_pointer(response) else ""
    )
    return StepLine(
        step=step,
        output_preview=json_preview(step.output, limit=PREVIEW_CHARS),
        model_text=json_preview(text, limit=PREVIEW_CHARS) if text else "",
        error=step.error if isinstance(step.error, dict) else None,
    )


@dataclass(frozen=True)
class ToolFacts:
    """What the registry says about a tool: what approving its call sets in motion."""

    name: str
    known: bool
    side_effect: str
    systems: tuple[str, ...]
    idempotent_remote: bool
    compensate_with: str | None


def tool_facts(name: str, *, recorded_side_effect: str = "") -> ToolFacts:
    try:
        tool = get_tool(name)
    except UnknownTool:
        return ToolFacts(name, False, recorded_side_effect or "unknown", (), False, None)
    return ToolFacts(
        name, True, tool.side_effect, tool.systems, tool.idempotent_remote, tool.compensate_with
    )


# -- gate panel --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GatePanel:
    gate: Gate
    task: Task
    steps: list[StepLine]
    calls: list[ToolCall]
    arguments_json: str
    tool: ToolFacts
    holder: Any

    @property
    def position(self) -> int:
        return self.gate.step.ordinal + 1

    @property
    def is_open(self) -> bool:
        return self.gate.status == GateStatus.OPEN


def gate_get_panel(*, gate_id: int) -> GatePanel:
    """A gate with its task, the task's steps and ledger rows, in three queries.

    Raises Gate.DoesNotExist for an unknown id.
    """
    gate = Gate.objects.select_related(
        "task", "task__created_by", "task__claim__user", "step", "decided_by"
    ).get(pk=gate_id)
    steps = list(Step.objects.filter(task_id=gate.task_id).order_by("ordinal"))
    calls = list(
        ToolCall.objects.filter(task_id=gate.task_id)
        .defer("args", "result")
        .annotate(step_ordinal=F("step__ordinal"))
        .order_by("id")
    )
    return GatePanel(
        gate=gate,
        task=gate.task,
        steps=[_step_line(s) for s in steps],
        calls=calls,
        arguments_json=pretty_json(gate.arguments),
        tool=tool_facts(gate.tool, recorded_side_effect=gate.side_effect),
        holder=_holder(gate.task),
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
class RecoveryPanel:
    detail: TaskDetail
    recovery: Recovery | None
    options: list[OptionView]
    unknown_calls: list[UnknownCall]
    exchanges: list[tuple[Step, str]]
    holder: Any

    @property
    def task(self) -> Task:
        return self.detail.task

    @property
    def failure(self) -> dict[str, Any]:
        failure = self.detail.task.failure
        return failure if isinstance(failure, dict) else {}


def task_get_recovery_panel(*, task_id: int, viewer: Any) -> RecoveryPanel:
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
    )


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


def audit_item_list(*, filters: AuditFilters) -> QuerySet[AuditItem]:
    """Audit items matching `filters`: items to review first, then newest first."""
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
    return queryset.annotate(
        pending_first=Case(
            When(status=AuditStatus.PENDING, then=Value(0)),
            default=Value(1),
            output_field=IntegerField(),
        )
    ).order_by("pending_first", "-created_at", "-id")


def audit_item_get(*, item_id: int) -> AuditItem:
    """One audit item with its context. Raises AuditItem.DoesNotExist."""
    return AuditItem.objects.select_related("task", "tool_call", "reviewed_by").get(pk=item_id)


def audit_filter_choices() -> dict[str, list[str]]:
    """The agents, tools and rules that occur in the queue, for the filter menus (one query)."""
    rows = AuditItem.objects.order_by().values_list("agent", "tool", "rule").distinct()
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
    )


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


def decision_log_list(
    *, filters: DecisionFilters, limit: int = LOG_LIMIT
) -> tuple[list[LogEntry], bool]:
    """The newest `limit` decisions matching `filters`, newest first, and whether more exist.

    Policy publishes and reverts live in `policies.PolicyChange` (policies imports no other app,
    so it cannot write here); they are read from there and merged by time. Two queries.
    """
    decisions = Decision.objects.all()
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
    entries = [_decision_entry(d) for d in decisions.order_by("-created_at", "-id")[: limit + 1]]
    if filters.task_id is None:
        # A policy change belongs to no task, so a task filter leaves them out.
        entries += [_policy_entry(c) for c in changes.order_by("-created_at", "-id")[: limit + 1]]
    entries.sort(key=lambda e: e.created_at, reverse=True)
    return entries[:limit], len(entries) > limit


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


def api_token_list(*, user: Any) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=user))


def delivery_list_for(*, user: Any, limit: int = 20) -> list[Delivery]:
    """The latest notifications sent (or being sent) to `user`."""
    return list(Delivery.objects.filter(user=user).select_related("notice")[:limit])
