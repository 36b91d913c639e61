"""Writes that people and scripts make on tasks. Each service owns its transaction.

The runner's own writes live in `agentops.engine`; these are the entry points from outside the
worker: create a task, pause it, resume it, abort it. Jobs are enqueued on commit.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentops.engine import children, gates
from agentops.engine.checkpoints import snapshot_state
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import AgentOpsError, StartRefused
from agentops.engine.jsonvalues import loaded, redacted, validated
from agentops.engine.planning import dependants, plan_check
from agentops.engine.registry import get_agent, plan_for, step_spec
from agentops.engine.transitions import (
    EventSpec,
    ledger_transition,
    step_transition,
    task_append_event,
    task_transition,
)
from agentops.models import Snapshot, Step, Task, ToolCall
from agentops.states import STEP_TRANSITIONS, LedgerStatus, StepStatus, TaskMode, TaskStatus
from policies.services import policy_version_ensure_active

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# Registered with the other role permissions in `reviews.roles`; asked through Django here.
START_TASK = "agentops.start_task"


class TransitionRefused(AgentOpsError):
    """The task is not in a status this action applies to (someone else acted first)."""


def task_create(
    *,
    agent: str,
    goal: str,
    input: dict[str, Any] | None = None,
    created_by: User | None = None,
    started_by: User | None = None,
    token_budget: int | None = None,
    cost_budget: Decimal | float | str | None = None,
    wall_time_budget_seconds: int | None = None,
    step_retry_cap: int | None = None,
    recovery_cap: int | None = None,
    policy: str = "default",
    parent_step: Step | None = None,
    fanout_index: int | None = None,
) -> Task:
    """Create a task for a registered agent with its plan, an initial snapshot, and a job.

    The task pins the active version of `policy`; every step is routed by it. A child task
    (`parent_step`: the parent's fan-out step) pins its parent's version instead. Secrets in
    the input are redacted before it is stored. Without a wall-time budget the task gets
    AGENTOPS_TASK_WALL_TIME_SECONDS (0: none).
    `started_by` is the person asking (the form, the API): they need `agentops.start_task` (else
    StartRefused, before anything is written) and are recorded as the task's creator. Creation
    inside the engine (child tasks, scenarios, benchmarks) passes no person and is not checked;
    `created_by` only records who the task is attributed to (a child, its parent's starter).
    Raises UnknownAgent for an unregistered agent, NotSerializable (with the path) for input or
    a goal that cannot be stored (not JSON, a NUL character, a lone surrogate, nesting deeper
    than `jsonvalues.MAX_DEPTH`) and PlanInvalid for a plan whose dependencies do not point at
    earlier steps.
    """
    from django.conf import settings

    if started_by is not None:
        if not started_by.has_perm(START_TASK):
            raise StartRefused(started_by.get_username() or "an anonymous user")
        created_by = started_by

    spec = get_agent(agent)
    task_input = redacted(validated(input or {}, "input"))
    goal = redacted(validated(goal.strip(), "goal"))
    if not goal:
        raise ValueError("goal: a task needs a goal")
    conf = settings.AGENTOPS
    plan = plan_for(spec, task_input)
    plan_check([p.depends_on for p in plan])
    parent = parent_step.task if parent_step is not None else None
    with transaction.atomic():
        task = Task.objects.create(
            policy_version=(
                parent.policy_version
                if parent is not None
                else policy_version_ensure_active(policy_name=policy)
            ),
            parent=parent,
            parent_step=parent_step,
            fanout_index=fanout_index,
            agent=spec.name,
            goal=goal,
            input=task_input,
            created_by=created_by if getattr(created_by, "pk", None) else None,
            step_count=len(plan),
            token_budget=token_budget,
            cost_budget=Decimal(str(cost_budget)) if cost_budget is not None else None,
            wall_time_budget_seconds=(
                wall_time_budget_seconds
                if wall_time_budget_seconds is not None
                else conf["TASK_WALL_TIME_SECONDS"] or None
            ),
            step_retry_cap=step_retry_cap or conf["STEP_RETRY_CAP"],
            recovery_cap=recovery_cap if recovery_cap is not None else conf["TASK_RECOVERY_CAP"],
        )
        steps = Step.objects.bulk_create(
            Step(
                task=task,
                ordinal=i,
                title=p.title,
                spec=step_spec(p),
                depends_on=list(p.depends_on),
            )
            for i, p in enumerate(plan)
        )
        Snapshot.objects.create(task=task, seq=0, state=snapshot_state(task, steps, []))
        seq = task_append_event(
            task_id=task.pk,
            event=EventSpec(
                "agentops.task.created",
                payload={
                    "agent": spec.name,
                    "steps": len(steps),
                    **(
                        {"parent": parent_step.task_id, "parent_step": parent_step.ordinal}
                        if parent_step is not None
                        else {}
                    ),
                },
            ),
            actor=created_by,
        )
        task_enqueue(task.pk, token=seq)
    return task


def _transition(
    task_id: int, name: str, *, actor: User | None, reason: str = "", **fields: Any
) -> int:
    """Apply an unfenced transition or raise TransitionRefused; returns the task's last seq.

    Caller holds the transaction.
    """
    moved = task_transition(
        task_id=task_id,
        name=name,
        actor=actor,
        payload={"reason": redacted(reason)} if reason else {},
        **fields,
    )
    if not moved:
        status = Task.objects.filter(pk=task_id).values_list("status", flat=True).first()
        if status is None:
            raise Task.DoesNotExist(f"task {task_id} does not exist")
        raise TransitionRefused(f"task {task_id} is {status}; cannot {name.replace('_', ' ')}")
    # A task leaving its gate any other way than by a decision on it withdraws the gate (a
    # decision closes its gate before resuming, so then there is nothing left to withdraw).
    gates.gates_withdraw(task_id=task_id, because=name)
    return Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()


def _resume(task_id: int, *, actor: User | None, reason: str = "", **fields: Any) -> int:
    """Resume a parked task: back to the queue, no pending retry time, failure cleared; its mode
    stays unless `mode` is given. Caller holds the transaction and enqueues the job."""
    return _transition(
        task_id,
        "resume",
        actor=actor,
        reason=reason,
        next_run_at=None,
        failure=None,
        **fields,
    )


def _check_forward(task_id: int, action: str) -> None:
    """Retry, skip and confirm move a task forward: refused while a rollback is unfinished."""
    mode = Task.objects.filter(pk=task_id).values_list("mode", flat=True).first()
    if mode == TaskMode.ROLLBACK:
        raise TransitionRefused(
            f"task {task_id} is rolling back; {action} would run it forward again: "
            "roll back again or abort"
        )


def _reset(step: Step, **fields: Any) -> None:
    """Put a stopped (failed or running) step back to pending, or refuse: its fold event must
    not be written for a row that did not change."""
    if not step_transition(step=step, name="reset", **fields):
        raise TransitionRefused(f"step {step.ordinal + 1} is {step.status}; it cannot be reset")


def _stopped_step(task_id: int) -> Step | None:
    """The step a stopped task is stuck on: the first one that is failed or left running."""
    return (
        Step.objects.filter(task_id=task_id, status__in=[StepStatus.FAILED, StepStatus.RUNNING])
        .order_by("ordinal")
        .first()
    )


def task_pause(*, task_id: int, actor: User, reason: str = "") -> None:
    """Park a task for a person: any worker holding it loses its lease at its next write."""
    with transaction.atomic():
        children.children_lock(task_id)
        _transition(task_id, "pause", actor=actor, reason=reason)
        children.children_propagate(parent_id=task_id, name="pause", actor=actor, reason=reason)


def task_resume(*, task_id: int, actor: User, reason: str = "") -> None:
    """Bring a parked task back to the queue, in the mode it was in, and enqueue a job for it.
    A gate it was waiting at is withdrawn (the runner routes the step again)."""
    with transaction.atomic():
        children.children_lock(task_id)
        _resume(task_id, actor=actor, reason=reason)
        children.children_propagate(parent_id=task_id, name="resume", actor=actor, reason=reason)
        _resume_events(task_id, actor=actor, events=[])


def task_retry(*, task_id: int, actor: User | None, reason: str = "") -> None:
    """Run the stopped step again with fresh attempts (same idempotency keys, so no effect
    repeats); a task stopped at the recovery cap gets its recoveries back too."""
    with transaction.atomic():
        _check_forward(task_id, "retry")
        _resume(task_id, recoveries=0, actor=actor, reason=reason)
        step = _stopped_step(task_id)
        events = []
        if step is not None:
            _reset(step, attempts=0, error=None)
            events.append(
                EventSpec(
                    STEP_TRANSITIONS["reset"].event,
                    step=step.ordinal,
                    payload={"intervention": "retry"},
                    fold={"steps": {str(step.ordinal): StepStatus.PENDING}},
                )
            )
        _resume_events(task_id, actor=actor, events=events)


def task_skip_step(*, task_id: int, actor: User, reason: str = "") -> None:
    """Mark the stopped step skipped (its output stays empty) and continue with the next one."""
    with transaction.atomic():
        _check_forward(task_id, "skip")
        step = _stopped_step(task_id)
        if step is None:
            raise TransitionRefused(f"task {task_id} has no stopped step to skip")
        _resume(task_id, actor=actor, reason=reason)
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
        _resume_events(task_id, actor=actor, events=events)


def task_rollback(*, task_id: int, actor: User | None, reason: str = "") -> None:
    """Have a worker undo the task's effects (compensations in reverse order), then end it
    `rolled_back`. Effects without a compensating tool are reported, not undone."""
    with transaction.atomic():
        children.children_lock(task_id)
        _resume(task_id, actor=actor, reason=reason, mode=TaskMode.ROLLBACK)
        # Unfinished children stop here; the parent's rollback compensates their effects too.
        children.children_propagate(parent_id=task_id, name="abort", actor=actor, reason=reason)
        _resume_events(
            task_id,
            actor=actor,
            events=[
                EventSpec("agentops.task.rollback_requested", payload={"reason": redacted(reason)})
            ],
        )


def task_abort(*, task_id: int, actor: User, reason: str = "") -> None:
    """End the task now. Effects already made stay made (they are listed on the task page)."""
    with transaction.atomic():
        children.children_lock(task_id)
        _transition(task_id, "abort", actor=actor, reason=reason)
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
            raise TransitionRefused(f"tool call {call_id} is {call.status}, not executed_unknown")
        _check_forward(call.task_id, "confirming")
        status = Task.objects.filter(pk=call.task_id).values_list("status", flat=True).get()
        if status != TaskStatus.NEEDS_ATTENTION:
            raise TransitionRefused(f"task {call.task_id} is {status}, not stopped for a person")
        _resume(call.task_id, actor=actor, reason=reason)
        answer = {
            "confirmed_by": getattr(actor, "username", "") or "unknown",
            "executed": executed,
            "reason": redacted(reason),
        }
        fields = {"result": {"confirmed": answer}} if executed else {"error": {"confirmed": answer}}
        ledger_transition(call_id=call.pk, target=target, **fields)
        _reset(call.step, attempts=0, error=None)
        _resume_events(
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


def task_gate_approved(
    *, task_id: int, step_id: int, approval: dict[str, Any], actor: User
) -> None:
    """Resume a task parked at a gate whose action a person approved (arguments possibly edited).

    Caller holds the transaction and has closed the gate. The approval is stored on the step; the
    runner checks it against the arguments' digest and the policy version before the call.
    """
    _resume(task_id, actor=actor)
    step = Step.objects.get(pk=step_id, task_id=task_id)
    _reset(step, attempts=0, approval=approval)
    _resume_events(
        task_id,
        actor=actor,
        events=[
            EventSpec(
                "agentops.step.approved",
                step=step.ordinal,
                payload={
                    "gate": approval.get("gate"),
                    "args_digest": approval["args_digest"],
                    "edited": approval.get("edited", False),
                },
                fold={"steps": {str(step.ordinal): StepStatus.PENDING}},
            )
        ],
    )


def task_gate_rejected(*, task_id: int, step_id: int, feedback: str, actor: User | None) -> bool:
    """Resume a task whose gated action was rejected: the step forgets the model's proposal and
    carries the feedback as a note, so the next model call re-plans it.

    The step counts rejections per arguments digest: when the same action has been rejected
    REJECT_LOOP_THRESHOLD times, the task is not resumed but held for a person (needs_attention,
    kind planning_loop), so a model that re-proposes it cannot loop through the gate forever.
    Returns True when the task was held instead of resumed. Caller holds the transaction and has
    closed the gate.
    """
    feedback = redacted(feedback)
    step = Step.objects.get(pk=step_id, task_id=task_id)
    response = loaded(step.model_response) or {}
    rejected = response.get("tool_calls") or []
    tool = rejected[0]["name"] if rejected else "the proposal"
    gate_digest = _gated_digest(step)
    counts = dict(step.spec.get("rejections") or {})
    if gate_digest:
        counts[gate_digest] = int(counts.get(gate_digest, 0)) + 1
    note = f"A reviewer rejected {tool}: {feedback}"
    spec = {**step.spec, "notes": [*(step.spec.get("notes") or []), note], "rejections": counts}
    threshold = reject_loop_threshold()
    times = counts.get(gate_digest, 0) if gate_digest else 0
    if times >= threshold:
        failure = {
            "layer": "orchestration",
            "kind": "planning_loop",
            "nature": "logic",
            "message": f"{tool} was rejected {times} times with the same arguments "
            f"(threshold {threshold}); a person decides how to go on",
            "retryable": False,
            "detail": {"args_digest": gate_digest, "rejections": times},
        }
        _transition(task_id, "hold", actor=actor, reason=feedback, failure=failure)
    else:
        _resume(task_id, actor=actor)
    _reset(step, attempts=0, model_response=None, approval=None, spec=spec)
    events = [
        EventSpec(
            "agentops.step.rejected",
            step=step.ordinal,
            payload={"feedback": feedback, "args_digest": gate_digest, "rejections": times},
            fold={"steps": {str(step.ordinal): StepStatus.PENDING}},
        )
    ]
    if times >= threshold:
        for event in events:
            task_append_event(task_id=task_id, event=event, actor=actor)
        return True
    _resume_events(task_id, actor=actor, events=events)
    return False


def reject_loop_threshold() -> int:
    """How many rejections of the same action hold a gated task for a person (default 2)."""
    from django.conf import settings

    return int(settings.AGENTOPS["REJECT_LOOP_THRESHOLD"])


def _gated_digest(step: Step) -> str:
    """The arguments digest the step was gated with (from its gated event's payload)."""
    from agentops.models import Event

    payload = (
        Event.objects.filter(
            task_id=step.task_id, step_ordinal=step.ordinal, action="agentops.step.gated"
        )
        .order_by("-seq")
        .values_list("payload", flat=True)
        .first()
    )
    return str((payload or {}).get("args_digest") or "")


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
            raise TransitionRefused(f"task {task_id} is {task.status}; it cannot be modified")
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
        _transition(task_id, "pause", actor=actor, reason="modify")
        _resume(task_id, actor=actor, reason=reason, **fields)
        _resume_events(
            task_id,
            actor=actor,
            events=[EventSpec("agentops.task.modified", payload={"changes": changes})],
        )
    return changes


def _resume_events(task_id: int, *, actor: User | None, events: list[EventSpec]) -> None:
    seq = Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()
    for event in events:
        seq = task_append_event(task_id=task_id, event=event, actor=actor)
    task_enqueue(task_id, token=seq)


__all__ = [
    "TransitionRefused",
    "ledger_confirm",
    "task_abort",
    "task_create",
    "task_gate_approved",
    "task_gate_rejected",
    "task_modify",
    "task_pause",
    "task_resume",
    "task_retry",
    "task_rollback",
    "task_skip_step",
]
