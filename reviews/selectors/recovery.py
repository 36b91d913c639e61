"""The recovery panel of a stopped task: the advisor's options, the ledger calls with an unknown
outcome, and the interventions already taken with what followed them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

from agentops.engine import Preview, Recovery, tool_facts
from agentops.models import Event, Step, Task, ToolCall
from agentops.selectors import TaskDetail, json_preview, task_get_detail
from agentops.states import LedgerStatus, TaskStatus
from reviews.models import Claim, Decision
from reviews.selectors._common import TASK_LOG_LIMIT, pretty_json
from reviews.selectors.tasks import task_open_gate_id

if TYPE_CHECKING:
    from django.contrib.auth.models import User


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

    @property
    def repeat_unprotected(self) -> bool:
        """See `call_repeat_unprotected`: the panel says so and asks the person to be sure."""
        return call_repeat_unprotected(self.call)


def call_repeat_unprotected(call: ToolCall) -> bool:
    """True when calling the tool again is not protected by the idempotency key: the registry
    does not say its remote honours keys (and it does more than read), or the tool is no longer
    registered. "It did not happen" then re-issues the call, and a wrong answer makes the effect
    twice (a refund paid twice), so the person must say they are sure."""
    facts = tool_facts(call.tool, recorded_side_effect=call.side_effect)
    return not (facts.known and (facts.idempotent_remote or facts.side_effect == "read"))


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
            return _("failed again: %(kind)s") % {"kind": str(kind).replace("_", " ")}
        if event.action == "agentops.task.succeeded":
            return _("succeeded")
        if event.action == "agentops.task.rolled_back":
            return _("rolled back")
    return _("no outcome yet")
