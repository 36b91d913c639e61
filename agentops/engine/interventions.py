"""The people's moves on a task, as engine commands: pause, resume, cancel (abort), the
interventions on a stopped task (retry, skip, rollback, abort), the answer for a call whose
outcome is unknown (`ledger_confirm`) and a change of budgets or input (`task_modify`). Each
command owns its transaction (a caller's outer transaction makes it a savepoint), takes the
engine's locks in the engine's order (a task's children before the task) and enqueues jobs on
commit. Who may make a move, and the log of who did, belong to the room above
(`reviews.services`), which calls these through the front door (`agentops.engine`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentops.engine import children
from agentops.engine.errors import AgentOpsError, TransitionRefused
from agentops.engine.gates import (
    resume_events_enqueue,
    resume_or_refuse,
    step_reset_or_refuse,
    transition_or_refuse,
)
from agentops.engine.jsonvalues import redacted, validated
from agentops.engine.planning import dependants
from agentops.engine.recovery import Recovery, intervention_recovery, stuck_step_load
from agentops.engine.registry import get_agent
from agentops.engine.transitions import (
    EventSpec,
    ledger_transition,
    step_transition,
    task_append_event,
)
from agentops.engine.versions import accepted_pin
from agentops.models import Step, Task, ToolCall
from agentops.states import STEP_TRANSITIONS, LedgerStatus, StepStatus, TaskMode, TaskStatus
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _check_forward(task_id: int, action: str) -> None:
    """Retry, skip and confirm move a task forward: refused while a rollback is unfinished."""
    mode = Task.objects.filter(pk=task_id).values_list("mode", flat=True).first()
    if mode == TaskMode.ROLLBACK:
        raise TransitionRefused(
            Phrase(
                gettext_noop(
                    "task %(task)s is rolling back; %(action)s would run it forward again: "
                    "roll back again or abort"
                ),
                {"task": task_id, "action": action},
            )
        )


def task_pause(*, task_id: int, actor: User, reason: str = "") -> None:
    """Park a task for a person: any worker holding it loses its lease at its next write."""
    with transaction.atomic():
        children.children_lock(task_id)
        transition_or_refuse(task_id, "pause", actor=actor, reason=reason)
        children.children_propagate(parent_id=task_id, name="pause", actor=actor, reason=reason)


def task_resume(*, task_id: int, actor: User, reason: str = "") -> None:
    """Bring a parked task back to the queue, in the mode it was in, and enqueue a job for it.
    A gate it was waiting at is withdrawn (the runner routes the step again)."""
    with transaction.atomic():
        children.children_lock(task_id)
        resume_or_refuse(task_id, actor=actor, reason=reason)
        children.children_propagate(parent_id=task_id, name="resume", actor=actor, reason=reason)
        resume_events_enqueue(task_id, actor=actor, events=[])


def task_retry(*, task_id: int, actor: User | None, reason: str = "") -> None:
    """Run the stopped step again with fresh attempts (same idempotency keys, so no effect
    repeats); a task stopped at the recovery cap gets its recoveries back too. A task stopped
    because its agent was re-declared goes on under the new declaration (`agent_accepted`)."""
    with transaction.atomic():
        _check_forward(task_id, "retry")
        events, fields = _agent_accepted(task_id)
        resume_or_refuse(task_id, recoveries=0, actor=actor, reason=reason, **fields)
        step = stuck_step_load(task_id)
        if step is not None:
            step_reset_or_refuse(step, attempts=0, error=None)
            events.append(
                EventSpec(
                    STEP_TRANSITIONS["reset"].event,
                    step=step.ordinal,
                    payload={"intervention": "retry"},
                    fold={"steps": {str(step.ordinal): StepStatus.PENDING}},
                )
            )
        resume_events_enqueue(task_id, actor=actor, events=events)


def _agent_accepted(task_id: int) -> tuple[list[EventSpec], dict[str, Any]]:
    """After an `agent_changed` stop, a retry accepts the declaration the worker saw: the task's
    pin moves to it, and an event says from which version to which."""
    row: dict[str, Any] = dict(
        Task.objects.filter(pk=task_id).values("failure", "agent_version").first() or {}
    )
    pin = accepted_pin(row.get("failure"))
    if pin is None:
        return [], {}
    before = (row.get("agent_version") or {}).get("digest")
    event = EventSpec(
        "agentops.task.agent_accepted",
        payload={"from": before, "to": pin["digest"], "changed": pin_changes(row, pin)},
    )
    return [event], {"agent_version": pin}


def pin_changes(row: dict[str, Any], pin: dict[str, Any]) -> list[str]:
    detail = (row.get("failure") or {}).get("detail") or {}
    changed = detail.get("changed")
    return [str(c) for c in changed] if isinstance(changed, list) else []


def task_skip_step(*, task_id: int, actor: User, reason: str = "") -> None:
    """Mark the stopped step skipped (its output stays empty) and continue with the next one."""
    with transaction.atomic():
        _check_forward(task_id, "skip")
        step = stuck_step_load(task_id)
        if step is None:
            raise TransitionRefused(
                Phrase(gettext_noop("task %(task)s has no stopped step to skip"), {"task": task_id})
            )
        resume_or_refuse(task_id, actor=actor, reason=reason)
        step_transition(step=step, name="skip", error=None, finished_at=timezone.now())
        events = [
            EventSpec(
                STEP_TRANSITIONS["skip"].event,
                step=step.ordinal,
                payload={"reason": redacted(reason)},
                fold={"steps": {str(step.ordinal): StepStatus.SKIPPED}},
            )
        ]
        # A step that depends on the skipped one can never get its output: skipped with it.
        plan = list(Step.objects.filter(task_id=task_id).order_by("ordinal"))
        for dependant in (s for s in plan if s.ordinal in dependants(plan, step.ordinal)):
            if step_transition(step=dependant, name="skip", error=None, finished_at=timezone.now()):
                events.append(
                    EventSpec(
                        STEP_TRANSITIONS["skip"].event,
                        step=dependant.ordinal,
                        payload={"reason": f"depends on skipped step {step.ordinal + 1}"},
                        fold={"steps": {str(dependant.ordinal): StepStatus.SKIPPED}},
                    )
                )
        resume_events_enqueue(task_id, actor=actor, events=events)


def task_rollback(*, task_id: int, actor: User | None, reason: str = "") -> None:
    """Have a worker undo the task's effects (compensations in reverse order), then end it
    `rolled_back`. Effects without a compensating tool are reported, not undone."""
    with transaction.atomic():
        children.children_lock(task_id)
        resume_or_refuse(task_id, actor=actor, reason=reason, mode=TaskMode.ROLLBACK)
        # Unfinished children stop here; the parent's rollback compensates their effects too.
        children.children_propagate(parent_id=task_id, name="abort", actor=actor, reason=reason)
        resume_events_enqueue(
            task_id,
            actor=actor,
            events=[
                EventSpec("agentops.task.rollback_requested", payload={"reason": redacted(reason)})
            ],
        )


def task_abort(*, task_id: int, actor: User, reason: str = "") -> None:
    """End the task now. Effects already made stay made (they are listed on the task page)."""
    _abort(task_id=task_id, actor=actor, reason=reason, said=None)


def task_cancel(*, task_id: int, actor: User, reason: str = "") -> None:
    """A person's Cancel of a task that is not stopped: an abort (the status stays `aborted`)
    whose event says `cancelled`, so the task page calls it "Cancelled"."""
    _abort(task_id=task_id, actor=actor, reason=reason, said={"cancelled": True})


def _abort(*, task_id: int, actor: User, reason: str, said: dict[str, bool] | None) -> None:
    with transaction.atomic():
        children.children_lock(task_id)
        transition_or_refuse(task_id, "abort", actor=actor, reason=reason, said=said)
        children.children_propagate(parent_id=task_id, name="abort", actor=actor, reason=reason)


def ledger_confirm(*, call_id: int, executed: bool, actor: User, reason: str = "") -> None:
    """Record a person's answer for an `executed_unknown` call, and let the task go on.

    Executed: the call counts as succeeded and the step completes with it. Not executed: the call
    is failed, and the task's next run calls the tool again with the same key.
    """
    with transaction.atomic():
        call = ToolCall.objects.select_related("step").get(pk=call_id)
        target = LedgerStatus.SUCCEEDED if executed else LedgerStatus.FAILED
        if call.status != LedgerStatus.EXECUTED_UNKNOWN:
            raise TransitionRefused(
                Phrase(
                    gettext_noop("tool call %(call)s is %(status)s, not executed_unknown"),
                    {"call": call_id, "status": call.status},
                )
            )
        _check_forward(call.task_id, "confirming")
        status = Task.objects.filter(pk=call.task_id).values_list("status", flat=True).get()
        if status != TaskStatus.NEEDS_ATTENTION:
            raise TransitionRefused(
                Phrase(
                    gettext_noop("task %(task)s is %(status)s, not stopped for a person"),
                    {"task": call.task_id, "status": status},
                )
            )
        resume_or_refuse(call.task_id, actor=actor, reason=reason)
        answer = {
            "confirmed_by": getattr(actor, "username", "") or "unknown",
            "executed": executed,
            "reason": redacted(reason),
        }
        fields = {"result": {"confirmed": answer}} if executed else {"error": {"confirmed": answer}}
        ledger_transition(call_id=call.pk, target=target, **fields)
        step_reset_or_refuse(call.step, attempts=0, error=None)
        resume_events_enqueue(
            call.task_id,
            actor=actor,
            events=[
                EventSpec(
                    f"agentops.ledger.confirmed_{'executed' if executed else 'not_executed'}",
                    step=call.step.ordinal,
                    payload={"key": call.idempotency_key, **answer},
                    fold={"ledger": {call.idempotency_key: target}},
                ),
                EventSpec(
                    STEP_TRANSITIONS["reset"].event,
                    step=call.step.ordinal,
                    payload={"intervention": "confirm"},
                    fold={"steps": {str(call.step.ordinal): StepStatus.PENDING}},
                ),
            ],
        )


# Budgets a person may change on a running or paused task.
BUDGET_FIELDS = ("token_budget", "cost_budget", "wall_time_budget_seconds")
MODIFIABLE = frozenset(
    {TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RETRY_SCHEDULED, TaskStatus.PAUSED}
)


def task_modify(
    *,
    task_id: int,
    actor: User,
    budgets: dict[str, Any] | None = None,
    input_changes: dict[str, Any] | None = None,
    reason: str = "",
) -> dict[str, Any]:
    """Change a task's budgets and the input fields its agent declares editable.

    A task a worker may hold is first paused (the worker stops at its next checkpoint, before it
    could act on the old values) and then resumed with the new values, so no worker ever runs
    with a row that changed under it; a paused task stays paused. The changed input is validated
    like any input, and the next step is routed by the policy with it. Returns what changed
    ({field: [before, after]}). Raises TransitionRefused for a task in another status and
    ValueError for a field that may not be changed.
    """
    budgets = {k: v for k, v in (budgets or {}).items() if k in BUDGET_FIELDS}
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task_id)
        if task.status not in MODIFIABLE:
            raise TransitionRefused(
                Phrase(
                    gettext_noop("task %(task)s is %(status)s; it cannot be modified"),
                    {"task": task_id, "status": task.status},
                )
            )
        editable = set(get_agent(task.agent).editable_input)
        unknown = sorted(set(input_changes or {}) - editable)
        if unknown:
            raise ValueError(
                f"input: {', '.join(unknown)} may not be changed (editable: "
                f"{', '.join(sorted(editable)) or 'none'})"
            )
        new_input = validated({**task.input, **(input_changes or {})}, "input")
        changes: dict[str, Any] = {
            name: [str(getattr(task, name)), str(value)]
            for name, value in budgets.items()
            if getattr(task, name) != value
        }
        changes.update(
            {
                f"input.{k}": [task.input.get(k), v]
                for k, v in (input_changes or {}).items()
                if task.input.get(k) != v
            }
        )
        if not changes:
            return {}
        fields = {**budgets, "input": new_input}
        if task.status == TaskStatus.PAUSED:
            task_append_event(
                task_id=task_id,
                event=EventSpec("agentops.task.modified", payload={"changes": changes}),
                actor=actor,
                **fields,
            )
            return changes
        transition_or_refuse(task_id, "pause", actor=actor, reason="modify")
        resume_or_refuse(task_id, actor=actor, reason=reason, **fields)
        resume_events_enqueue(
            task_id,
            actor=actor,
            events=[EventSpec("agentops.task.modified", payload={"changes": changes})],
        )
    return changes


# The controls of a task that is not stopped, by the name people use: pause, resume, cancel.
CONTROLS = {"pause": task_pause, "resume": task_resume, "cancel": task_cancel}
# The interventions on a stopped task, by name (the recovery advisor offers them).
INTERVENTIONS = {
    "retry": task_retry,
    "skip": task_skip_step,
    "rollback": task_rollback,
    "abort": task_abort,
}


class InterventionRefused(AgentOpsError):
    """The intervention is not one the advisor offers for the task now; the message names the
    options that are."""


# The caller's own checks on the locked task (its room's claims): raises to refuse, before
# anything moves.
TaskCheck = Callable[[Task], None]


def _no_check(task: Task) -> None:
    return None


def task_intervene(
    *, task_id: int, action: str, actor: User, reason: str = "", check: TaskCheck = _no_check
) -> tuple[Task, Recovery]:
    """Apply intervention `action` (retry, skip, rollback, abort) to a stopped task, if the
    advisor offers it for the task now; returns the task as it was (locked, with its policy
    version) and the recovery it was judged by, for the caller's log in the same transaction.

    Raises TransitionRefused when the task is no longer stopped (someone acted first) and
    InterventionRefused when `action` is not an option now; `check` runs on the locked task in
    between (as before: the task's state is refused first, the person next, the option last).
    """
    if action not in INTERVENTIONS:
        raise ValueError(f"unknown intervention {action!r}")
    with transaction.atomic():
        task = (
            Task.objects.select_for_update(of=("self",))
            .select_related("policy_version")
            .get(pk=task_id)
        )
        recovery = intervention_recovery(task)
        check(task)
        refusal = recovery.refusal(action)
        if refusal is not None:
            raise InterventionRefused(refusal)
        INTERVENTIONS[action](task_id=task_id, actor=actor, reason=reason)
    return task, recovery


def task_control(*, task_id: int, action: str, actor: User, reason: str = "") -> Task:
    """Pause, resume or cancel a task; returns its row as it was before, locked (with its
    policy version), for the caller's log in the same transaction.

    The locks come in the engine's order: the task's children, then the task (the moves
    propagate to the children). Resume applies to a paused task only: a task stopped or gated
    is resumed by an intervention or a decision. A task no longer in a status the action
    applies to raises TransitionRefused, so a replayed request is refused, not applied twice.
    """
    if action not in CONTROLS:
        raise ValueError(f"unknown action {action!r}")
    with transaction.atomic():
        children.children_lock(task_id)
        task = (
            Task.objects.select_for_update(of=("self",))
            .select_related("policy_version")
            .get(pk=task_id)
        )
        if action == "resume" and task.status != TaskStatus.PAUSED:
            raise TransitionRefused(
                Phrase(
                    gettext_noop("task %(task)s is %(status)s, not paused"),
                    {"task": task_id, "status": task.status},
                )
            )
        CONTROLS[action](task_id=task_id, actor=actor, reason=reason)
    return task
