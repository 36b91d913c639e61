"""Task, step, ledger and gate statuses and the transitions between them, declared once.

Pure Python: no ORM. `agentops.engine.transitions` is the only code that writes a task, step or
ledger status, and `agentops.engine.gates` the only code that writes a gate's; both do so with a
conditional UPDATE whose WHERE clause comes from the tables below; each task and step transition
also declares the event action that records it. The database refuses any other task, step or
ledger move: triggers (migrations 0003 for the ledger, 0009 for tasks and steps) hold the same
(source, target) pairs, and a test compares them with these tables.

The values are machine codes (the API, URLs and the database hold them); only the labels people
read are translated (lazily, in the reader's language).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models
from django.utils.translation import gettext_lazy as _


class TaskStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
    RETRY_SCHEDULED = "retry_scheduled", _("Retry scheduled")
    NEEDS_ATTENTION = "needs_attention", _("Needs attention")
    PAUSED = "paused", _("Paused")
    # A fan-out step's parent task, parked without a worker until its child tasks finish.
    AWAITING_CHILDREN = "awaiting_children", _("Awaiting child tasks")
    SUCCEEDED = "succeeded", _("Succeeded")
    ABORTED = "aborted", _("Aborted")
    ROLLED_BACK = "rolled_back", _("Rolled back")


TERMINAL = frozenset({TaskStatus.SUCCEEDED, TaskStatus.ABORTED, TaskStatus.ROLLED_BACK})
# A worker may claim a task in these statuses (a `running` one only once its lease has expired).
CLAIMABLE = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RETRY_SCHEDULED})
# Parked tasks hold no worker: a human decision or a due time brings them back.
PARKED = frozenset(
    {
        TaskStatus.AWAITING_APPROVAL,
        TaskStatus.RETRY_SCHEDULED,
        TaskStatus.NEEDS_ATTENTION,
        TaskStatus.PAUSED,
        TaskStatus.AWAITING_CHILDREN,
    }
)


@dataclass(frozen=True)
class Transition:
    name: str
    sources: frozenset[str]
    target: str
    # True when the transition is made by the lease holder and must be fenced by its epoch.
    # Transitions made from outside (a person, the sweeper) revoke any lease instead.
    fenced: bool
    # The event action that records the transition in the task's log.
    event: str


def _t(name: str, sources: set[str], target: str, *, fenced: bool, event: str) -> Transition:
    return Transition(name, frozenset(sources), target, fenced, event)


_S = TaskStatus
TASK_TRANSITIONS: dict[str, Transition] = {
    t.name: t
    for t in [
        # Claiming a task is the `start` transition; its fence is lease expiry, not an epoch.
        _t(
            "start",
            {_S.QUEUED, _S.RUNNING, _S.RETRY_SCHEDULED},
            _S.RUNNING,
            fenced=False,
            event="agentops.task.claimed",
        ),
        # The holder gives the task back at the end of its time slice (another job picks it up).
        _t("yield", {_S.RUNNING}, _S.QUEUED, fenced=True, event="agentops.task.yielded"),
        _t(
            "await_approval",
            {_S.RUNNING},
            _S.AWAITING_APPROVAL,
            fenced=True,
            event="agentops.task.awaiting_approval",
        ),
        _t(
            "schedule_retry",
            {_S.RUNNING},
            _S.RETRY_SCHEDULED,
            fenced=True,
            event="agentops.task.retry_scheduled",
        ),
        _t("stop", {_S.RUNNING}, _S.NEEDS_ATTENTION, fenced=True, event="agentops.task.stopped"),
        _t("succeed", {_S.RUNNING}, _S.SUCCEEDED, fenced=True, event="agentops.task.succeeded"),
        # A fan-out step parks its task until the child tasks are terminal; the last child's
        # terminal transaction (or the sweeper, from the database) wakes it exactly once.
        _t(
            "await_children",
            {_S.RUNNING},
            _S.AWAITING_CHILDREN,
            fenced=True,
            event="agentops.task.awaiting_children",
        ),
        _t("wake", {_S.AWAITING_CHILDREN}, _S.QUEUED, fenced=False, event="agentops.task.woken"),
        # From outside the worker.
        # A person parks a task: a running worker loses its lease at its next checkpoint; a task
        # waiting at a gate leaves it (the gate is withdrawn, and routed again on resume); a parent
        # waiting on its children pauses with them.
        _t(
            "pause",
            {_S.QUEUED, _S.RUNNING, _S.RETRY_SCHEDULED, _S.AWAITING_APPROVAL, _S.AWAITING_CHILDREN},
            _S.PAUSED,
            fenced=False,
            event="agentops.task.paused",
        ),
        # A person's decision stops a gated task for a person (the same action rejected again).
        _t(
            "hold",
            {_S.AWAITING_APPROVAL},
            _S.NEEDS_ATTENTION,
            fenced=False,
            event="agentops.task.held",
        ),
        _t(
            "resume",
            {
                _S.AWAITING_APPROVAL,
                _S.NEEDS_ATTENTION,
                _S.PAUSED,
                _S.RETRY_SCHEDULED,
                _S.AWAITING_CHILDREN,
            },
            _S.QUEUED,
            fenced=False,
            event="agentops.task.resumed",
        ),
        _t(
            "abort",
            set(TaskStatus.values) - TERMINAL,
            _S.ABORTED,
            fenced=False,
            event="agentops.task.aborted",
        ),
        # A person asks for a rollback by resuming the task in rollback mode; the worker that then
        # runs the compensations ends it.
        _t(
            "roll_back",
            {_S.RUNNING},
            _S.ROLLED_BACK,
            fenced=True,
            event="agentops.task.rolled_back",
        ),
    ]
}


class TaskMode(models.TextChoices):
    """What the next worker does with a task: move it forward, or undo its effects."""

    FORWARD = "forward", _("Forward")
    ROLLBACK = "rollback", _("Rollback")


class StepStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    SKIPPED = "skipped", _("Skipped")


STEP_DONE = frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED})


class Phase(models.TextChoices):
    """Where a step is in the checkpoint protocol; the breakpoint shown to operators."""

    BEFORE_MODEL_CALL = "before_model_call", _("Before model call")
    MODEL_RESULT = "model_result", _("Model result recorded")
    BEFORE_TOOL_CALL = "before_tool_call", _("Before tool call")
    AFTER_TOOL_CALL = "after_tool_call", _("After tool call")
    STEP_COMPLETE = "step_complete", _("Step complete")


class LedgerStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    EXECUTED_UNKNOWN = "executed_unknown", _("Executed (unknown)")
    COMPENSATED = "compensated", _("Compensated")


_L = LedgerStatus
LEDGER_TRANSITIONS: dict[str, frozenset[str]] = {
    _L.PENDING: frozenset({_L.SUCCEEDED, _L.FAILED, _L.EXECUTED_UNKNOWN}),
    _L.EXECUTED_UNKNOWN: frozenset({_L.SUCCEEDED, _L.FAILED}),
    _L.SUCCEEDED: frozenset({_L.COMPENSATED}),
    _L.FAILED: frozenset(),
    _L.COMPENSATED: frozenset(),
}


def ledger_sources(target: str) -> frozenset[str]:
    """Statuses a ledger row may move to `target` from."""
    return frozenset(s for s, targets in LEDGER_TRANSITIONS.items() if target in targets)


_P = StepStatus
# A step's events are appended by the code that moves it, in the same transaction (a step that
# succeeds is recorded as `agentops.step.completed`).
STEP_TRANSITIONS: dict[str, Transition] = {
    t.name: t
    for t in [
        # A step is started again after a crash or a retry: `running` and `failed` are sources too.
        _t(
            "start",
            {_P.PENDING, _P.RUNNING, _P.FAILED},
            _P.RUNNING,
            fenced=True,
            event="agentops.step.started",
        ),
        _t("succeed", {_P.RUNNING}, _P.SUCCEEDED, fenced=True, event="agentops.step.completed"),
        _t("fail", {_P.RUNNING}, _P.FAILED, fenced=True, event="agentops.step.failed"),
        _t(
            "skip",
            {_P.PENDING, _P.RUNNING, _P.FAILED},
            _P.SKIPPED,
            fenced=False,
            event="agentops.step.skipped",
        ),
        _t("reset", {_P.RUNNING, _P.FAILED}, _P.PENDING, fenced=False, event="agentops.step.reset"),
    ]
}


class GateStatus(models.TextChoices):
    OPEN = "open", _("Open")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")
    EXPIRED = "expired", _("Expired")


_G = GateStatus
# A gate is decided once: every transition leaves `open`. A decision approves or rejects it (a
# rejection that also stops the task is a rejection); the sweeper expires it past its due time; a
# task that leaves it without a decision (aborted, paused, resumed by an intervention) withdraws it,
# which closes it as expired. Escalation to another group keeps it open (no status change).
# A gate's move has no event of its own: the task's log records what the task did (resumed,
# stopped) and the people's decision log (`reviews`) what the person decided (approved, edited,
# rejected and stopped, ...), which is finer than the gate's status.
GATE_TRANSITIONS: dict[str, Transition] = {
    t.name: t
    for t in [
        _t("approve", {_G.OPEN}, _G.APPROVED, fenced=False, event=""),
        _t("reject", {_G.OPEN}, _G.REJECTED, fenced=False, event=""),
        _t("expire", {_G.OPEN}, _G.EXPIRED, fenced=False, event=""),
        _t("withdraw", {_G.OPEN}, _G.EXPIRED, fenced=False, event=""),
    ]
}


class AuditStatus(models.TextChoices):
    """Where an audit item is in its review by a person (`reviews` runs that workflow)."""

    PENDING = "pending", _("To review")
    OK = "ok", _("OK")
    FLAGGED = "flagged", _("Flagged")
