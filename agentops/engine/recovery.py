"""Recovery assembly: what the advisor recommends for a stopped task, from rows already loaded.

The rules of a stopped task live here, in one place: which step it is stuck on (the first one
failed or left running), how the ledger reads to the advisor (`ledger_views`), what each option
would do (`preview`, with the skip preview corrected for dependencies), and where the task
stopped relative to its tool call (`breakpoint_where`). Selectors load the rows and call
`task_recovery`; the gate panel asks `stop_previews` what stopping at a gate would do; an
intervention is checked against the options offered now (`intervention_recovery`,
`Recovery.refusal`). Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentops.engine import retries
from agentops.engine.advisor import (
    Action,
    LedgerView,
    Preview,
    Recommendation,
    StepView,
    advise,
    preview,
    situation_from,
)
from agentops.engine.errors import FailureKind, TransitionRefused, UnknownTool
from agentops.engine.planedit import repair_fixes_the_stop
from agentops.engine.planning import preview_skip_with_dependants
from agentops.engine.registry import get_tool
from agentops.engine.scopes import missing_scope_of
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import (
    STEP_TRANSITIONS,
    LedgerStatus,
    Phase,
    StepStatus,
    TaskMode,
    TaskStatus,
)
from policies.phrases import Phrase, gettext_noop

# The statuses of the step a stopped task is stuck on: failed, or left running by a worker.
STUCK = frozenset({StepStatus.FAILED, StepStatus.RUNNING})
# The events the recovery reads, by the step transitions that write them.
STARTED = STEP_TRANSITIONS["start"].event
FAILED = STEP_TRANSITIONS["fail"].event
RESET = STEP_TRANSITIONS["reset"].event
# Failure kinds where the service answered and said no: the call ran and was refused.
REFUSED_KINDS = frozenset(
    {
        FailureKind.AUTHORIZATION_GAP,
        FailureKind.BAD_REQUEST,
        FailureKind.CONFLICT,
        FailureKind.SCHEMA_MISMATCH,
    }
)
# What stopping a task at its gate can do (the gate panel's "reject and stop").
STOP_OPTIONS = (Action.ABORT, Action.ROLLBACK)


@dataclass(frozen=True)
class Recovery:
    """What the advisor recommends for a stopped task, and what each option would do."""

    recommendation: Recommendation
    previews: dict[str, Preview]
    stuck_step: Step | None
    breakpoint: str
    # Every attempt of the stuck step, manual retries included (`stuck_step.attempts` counts
    # the current round against the cap), and the manual retries that failed the same way.
    attempts_total: int = 0
    failed_retries: int = 0

    def refusal(self, action: str) -> str | None:
        """Why `action` may not be taken on the task now (None: it is one of the options)."""
        if action in self.recommendation.options:
            return None
        return Phrase(
            gettext_noop(
                "%(action)s is not an option for this task now; choose one of %(options)s"
            ),
            {"action": action, "options": ", ".join(self.recommendation.options)},
        )


@dataclass(frozen=True)
class ToolFacts:
    """What the registry says about a tool: what running (or approving) its call sets in motion."""

    name: str
    known: bool
    side_effect: str
    systems: tuple[str, ...]
    idempotent_remote: bool
    compensate_with: str | None

    @property
    def compensable(self) -> bool:
        return self.compensate_with is not None


def tool_facts(name: str, *, recorded_side_effect: str = "") -> ToolFacts:
    """The registered tool's facts; an unknown tool (no longer registered) is known by the side
    effect its ledger row recorded, else "unknown"."""
    try:
        tool = get_tool(name)
    except UnknownTool:
        return ToolFacts(name, False, recorded_side_effect or "unknown", (), False, None)
    return ToolFacts(
        name, True, tool.side_effect, tool.systems, tool.idempotent_remote, tool.compensate_with
    )


def stuck_step(steps: Sequence[Step]) -> Step | None:
    """The step a stopped task is stuck on, from its steps in ordinal order."""
    return next((s for s in steps if s.status in STUCK), None)


def stuck_step_load(task_id: int) -> Step | None:
    """The step a stopped task is stuck on, read from the database."""
    return Step.objects.filter(task_id=task_id, status__in=STUCK).order_by("ordinal").first()


def live_call_steps(calls: Sequence[ToolCall]) -> set[int]:
    """Steps holding a ledger row that still counts (failed tries are history)."""
    return {
        c.step_id for c in calls if c.status != LedgerStatus.FAILED and c.compensation_of_id is None
    }


def ledger_views(calls: Sequence[ToolCall]) -> list[LedgerView]:
    """The ledger rows as the advisor reads them: a tool no longer registered is known by the
    side effect its row recorded, and is not compensable."""
    views = []
    for call in calls:
        facts = tool_facts(call.tool, recorded_side_effect=call.side_effect)
        views.append(
            LedgerView(
                key=call.idempotency_key,
                tool=call.tool,
                status=call.status,
                side_effect=facts.side_effect if facts.known else call.side_effect,
                compensable=facts.compensable,
                compensates=None
                if call.compensation_of_id is None
                else str(call.compensation_of_id),
            )
        )
    return views


def step_views(steps: Sequence[Step]) -> list[StepView]:
    return [StepView(s.ordinal, s.title, s.status) for s in steps]


def stop_previews(calls: Sequence[ToolCall], steps: Sequence[Step]) -> dict[str, Preview]:
    """What ending a task now would do: abort keeps the effects, rollback undoes them."""
    views, ledger = step_views(steps), ledger_views(calls)
    return {str(option): preview(option, views, ledger) for option in STOP_OPTIONS}


def retries_failed_again(events: list[Event], *, ordinal: int, kind: str) -> int:
    """How many manual retries of step `ordinal` ended in a failure of the same `kind`: each
    retry (a step reset by the retry intervention) is judged by the step's next failure."""
    count, waiting = 0, False
    for event in sorted(events, key=lambda e: e.seq):
        if event.step_ordinal != ordinal:
            continue
        payload = event.payload or {}
        if event.action == RESET and payload.get("intervention") == "retry":
            waiting = True
        elif event.action == FAILED and waiting:
            waiting = False
            if (payload.get("failure") or {}).get("kind") == kind:
                count += 1
    return count


def step_attempts_total(events: list[Event], *, ordinal: int) -> int:
    """Every start of step `ordinal`, across manual retries (its `attempts` counts one round)."""
    return sum(1 for e in events if e.step_ordinal == ordinal and e.action == STARTED)


# Where a task no step of which is stuck stopped, by its phase: words of its own (the phase's
# label is translated lazily, in whoever's language is active, and the breakpoint is stored in the
# decision that resolves the stop).
PHASE_WHERE: dict[str, str] = {
    Phase.BEFORE_MODEL_CALL: gettext_noop("before model call"),
    Phase.MODEL_RESULT: gettext_noop("model result recorded"),
    Phase.BEFORE_TOOL_CALL: gettext_noop("before tool call"),
    Phase.AFTER_TOOL_CALL: gettext_noop("after tool call"),
    Phase.STEP_COMPLETE: gettext_noop("step complete"),
}


def breakpoint_where(task: Task, stuck: Step | None, calls: list[ToolCall]) -> str:
    """Where the task really stopped relative to its tool call: before it (nothing sent), during
    it (outcome unknown), or after it (refused or failed, with why)."""
    if stuck is None:
        if task.phase and task.phase not in PHASE_WHERE:
            return task.phase
        return Phrase(PHASE_WHERE.get(task.phase, gettext_noop("not started")))
    live = [c for c in calls if c.step_id == stuck.pk and c.compensation_of_id is None]
    if not live:
        return Phrase(gettext_noop("before the tool call: nothing was sent"))
    last = live[-1]
    failure = task.failure if isinstance(task.failure, dict) else {}
    kind = str(failure.get("kind") or "").replace("_", " ")
    if last.status == LedgerStatus.EXECUTED_UNKNOWN:
        return Phrase(gettext_noop("during the tool call: sent, outcome unknown"))
    if last.status == LedgerStatus.PENDING:
        return Phrase(gettext_noop("during the tool call: sent, outcome not recorded yet"))
    if last.status == LedgerStatus.FAILED:
        if failure.get("kind") in REFUSED_KINDS:
            return Phrase(
                gettext_noop("after the tool call: the service refused it (%(kind)s)"),
                {"kind": kind},
            )
        return Phrase(
            gettext_noop("after the tool call: it failed (%(kind)s), no effect recorded"),
            {"kind": kind or "error"},
        )
    return Phrase(gettext_noop("after the tool call: it succeeded, the step did not complete"))


def _stuck_side_effect(stuck: Step | None, calls: Sequence[ToolCall]) -> str | None:
    """The side effect at stake in the stuck step: its last call's, else its tool's."""
    stuck_calls = [c for c in calls if stuck is not None and c.step_id == stuck.pk]
    if stuck_calls:
        return stuck_calls[-1].side_effect
    if stuck is not None and stuck.spec.get("tool"):
        facts = tool_facts(stuck.spec["tool"])
        return facts.side_effect if facts.known else None
    return None


def task_recovery(
    task: Task, steps: list[Step], calls: Sequence[ToolCall], events: list[Event] | None = None
) -> Recovery | None:
    """Advise on a task stopped in needs_attention, from rows already loaded by the caller.

    `events` (the task's newest events) let the advisor see manual retries that already failed
    the same way, and count every attempt of the stuck step."""
    if task.status != TaskStatus.NEEDS_ATTENTION or not isinstance(task.failure, dict):
        return None
    stuck = stuck_step(steps)
    ledger = ledger_views(calls)
    views = step_views(steps)
    kind = str(task.failure.get("kind") or "")
    failed_retries = (
        retries_failed_again(events, ordinal=stuck.ordinal, kind=kind)
        if events is not None and stuck is not None
        else 0
    )
    situation = situation_from(
        failure=task.failure,
        side_effect=_stuck_side_effect(stuck, calls),
        steps=views,
        ledger=ledger,
        step_attempts=stuck.attempts if stuck else 0,
        step_retry_cap=retries.attempt_cap(task, retries.step_tool(stuck) if stuck else None),
        task_recoveries=task.recoveries,
        task_recovery_cap=task.recovery_cap,
        rolling_back=task.mode == TaskMode.ROLLBACK,
        failed_retries=failed_retries,
        missing_scope=missing_scope_of(task.failure),
        repairable=not any(c.status == LedgerStatus.EXECUTED_UNKNOWN for c in calls)
        and repair_fixes_the_stop(steps, live_call_steps(calls)),
    )
    recommendation = advise(situation)
    previews = {
        str(option): preview(option, views, ledger)
        for option in recommendation.options
        if option not in (Action.CONFIRM, Action.REPAIR)
    }
    if stuck is not None and "skip" in previews:
        previews["skip"] = preview_skip_with_dependants(previews["skip"], steps, stuck.ordinal)
    position = stuck.ordinal + 1 if stuck else min(task.current_step + 1, task.step_count)
    total = (
        step_attempts_total(events, ordinal=stuck.ordinal)
        if events is not None and stuck is not None
        else (stuck.attempts if stuck else 0)
    )
    where = breakpoint_where(task, stuck, list(calls))
    return Recovery(
        recommendation=recommendation,
        previews=previews,
        stuck_step=stuck,
        breakpoint=Phrase(
            gettext_noop("step %(position)s of %(count)s, %(where)s"),
            {"position": position, "count": task.step_count, "where": where},
        ),
        attempts_total=max(total, stuck.attempts if stuck else 0),
        failed_retries=failed_retries,
    )


def intervention_recovery(task: Task) -> Recovery:
    """The recovery of `task` an intervention is checked against, read in three queries; raise
    TransitionRefused when the task is not stopped for a person. Caller holds the task's row
    lock, so the options cannot change before the intervention is applied."""
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    calls = list(ToolCall.objects.filter(task=task).defer("args", "result").order_by("id"))
    events = list(Event.objects.filter(task=task, action__in=(RESET, FAILED)).order_by("seq"))
    recovery = task_recovery(task, steps, calls, events)
    if recovery is None:
        raise TransitionRefused(
            Phrase(
                gettext_noop("task %(task)s is %(status)s; there is nothing to recover"),
                {"task": task.pk, "status": task.status},
            )
        )
    return recovery
