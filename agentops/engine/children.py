"""Fan-out: a step spawns child tasks, its task parks without a worker, the last child wakes it.

A fan-out step (`PlanStep(fan_out=<name>)`) asks the registered fan-out function for child specs
and, in one fenced transaction, creates every child (a full task: its own lease, checkpoints,
ledger and policy routing, pinned to the parent's policy version; `agentops_task_child_once_uniq`
makes the spawn happen once) and parks the parent `awaiting_children`. Each child runs on any
worker. A child's terminal transaction locks the parent row and, when no sibling is left
unfinished, wakes it (`wake`, conditional on `awaiting_children`): exactly once, because the
lock serializes the siblings' checks and the transition has one source. The sweeper wakes, from
the database, a parent whose wake was lost. The woken parent collects the children's results as
the step's output, or stops when a child did not succeed.

Lock order, everywhere: child rows, then the parent row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef

from agentops.engine import gates
from agentops.engine.checkpoints import snapshot_write
from agentops.engine.crashpoints import crashpoint
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import FailureKind, OrchestrationFailure
from agentops.engine.jsonvalues import loaded
from agentops.engine.tasks import task_create
from agentops.engine.transitions import (
    EventSpec,
    Lease,
    children_unfinished,
    fenced_write,
    parent_wake,
    task_append_event,
    task_transition,
)
from agentops.models import Step, Task
from agentops.states import TASK_TRANSITIONS, TERMINAL, Phase, TaskStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChildSpec:
    """One child task to spawn: a registered agent, a goal and its input."""

    agent: str
    goal: str
    input: dict[str, Any]


# A fan-out function maps the parent's input and its done steps' outputs (by ordinal) to the
# child tasks to spawn.
FanOutFn = Callable[[dict[str, Any], dict[int, Any]], list[ChildSpec]]
_FAN_OUTS: dict[str, FanOutFn] = {}


def fan_out(name: str) -> Callable[[FanOutFn], FanOutFn]:
    """Register a fan-out function under `name` (what `PlanStep.fan_out` names)."""

    def register(fn: FanOutFn) -> FanOutFn:
        _FAN_OUTS[name] = fn
        return fn

    return register


@dataclass(frozen=True)
class Collected:
    """What a fan-out step produced on this claim: the children's results, or a park."""

    output: dict[str, Any] | None = None
    parked: bool = False


# -- the lease holder's side -----------------------------------------------------------------


def fan_out_run(*, lease: Lease, task: Task, step: Step, steps: list[Step]) -> Collected:
    """Run fan-out step `step` of `task` for the lease holder: spawn the children and park, park
    again while some are unfinished, or collect their results. Raises OrchestrationFailure
    (not retryable) when a child ended without succeeding."""
    children = list(Task.objects.filter(parent_step=step).order_by("fanout_index"))
    if not children:
        _spawn_and_park(lease=lease, task=task, step=step, steps=steps)
        return Collected(parked=True)
    if any(child.status not in TERMINAL for child in children):
        _park(lease=lease, task=task, step=step, spawned=0)
        return Collected(parked=True)
    failed = [child for child in children if child.status != TaskStatus.SUCCEEDED]
    if failed:
        raise OrchestrationFailure(
            f"child task {failed[0].pk} ({failed[0].agent}) ended {failed[0].status}: "
            "the fan-out step cannot collect its result",
            kind=FailureKind.CHILD_FAILED,
            retryable=False,
            detail={"children": [{"task": c.pk, "status": c.status} for c in failed]},
        )
    output = {"children": [_child_result(child) for child in children]}
    crashpoint("fan_out_collected", step=step.ordinal)
    return Collected(output=output)


def _child_result(child: Task) -> dict[str, Any]:
    outputs = [
        loaded(output)
        for output in child.steps.order_by("ordinal").values_list("output", flat=True)
    ]
    return {
        "task": child.pk,
        "agent": child.agent,
        "input": child.input,
        "status": child.status,
        "outputs": outputs,
    }


def _spawn_and_park(*, lease: Lease, task: Task, step: Step, steps: list[Step]) -> None:
    name = step.spec["fan_out"]
    try:
        fn = _FAN_OUTS[name]
    except KeyError:
        raise OrchestrationFailure(
            f"fan-out {name!r} is not registered", kind=FailureKind.UNKNOWN_FAN_OUT, retryable=False
        ) from None
    outputs = {s.ordinal: loaded(s.output) for s in steps if s.output is not None}
    specs = fn(task.input, outputs)
    if not specs:
        raise OrchestrationFailure(
            f"fan-out {name!r} produced no child tasks",
            kind=FailureKind.OUTPUT_INVALID,
            retryable=False,
        )
    with transaction.atomic():
        created = [
            task_create(
                agent=spec.agent,
                goal=spec.goal,
                input=spec.input,
                parent_step=step,
                fanout_index=index,
                created_by=task.created_by,
            )
            for index, spec in enumerate(specs)
        ]
        _park(lease=lease, task=task, step=step, spawned=len(created), children=created)
    crashpoint("after_fan_out", step=step.ordinal)


def _park(
    *,
    lease: Lease,
    task: Task,
    step: Step,
    spawned: int,
    children: list[Task] | None = None,
) -> None:
    """Park the task `awaiting_children` (the job ends). Written after the children rows exist
    and before re-reading them, under the parent row lock the fenced UPDATE takes: a child that
    finished before this transaction is seen below and wakes the parent at once; one finishing
    after it waits for the lock and finds the parent parked."""
    events = []
    if spawned:
        events.append(
            EventSpec(
                "agentops.step.fanned_out",
                step=step.ordinal,
                payload={
                    "children": [{"task": c.pk, "agent": c.agent} for c in children or []],
                    "phase": Phase.BEFORE_TOOL_CALL,
                },
            )
        )
    with transaction.atomic():
        seq = fenced_write(lease, events, transition="await_children")
        snapshot_write(task_id=task.pk, seq=seq)
        if not children_unfinished(task.pk).exists():
            parent_wake(task.pk, because=None)


# -- the children's side -------------------------------------------------------------------


def parents_wake_stranded() -> int:
    """Sweeper hook: wake every parked parent whose children are all terminal (a wake lost to a
    crash between commits cannot happen, but the database is the truth: check it)."""
    stranded = (
        Task.objects.filter(status=TaskStatus.AWAITING_CHILDREN)
        .exclude(Exists(Task.objects.filter(parent=OuterRef("pk")).exclude(status__in=TERMINAL)))
        .values_list("pk", flat=True)
    )
    woken = 0
    for parent_id in list(stranded):
        with transaction.atomic():
            Task.objects.select_for_update().filter(pk=parent_id).first()
            if not children_unfinished(parent_id).exists() and parent_wake(parent_id, because=None):
                woken += 1
    return woken


# -- propagation of a person's intervention on the parent -----------------------------------


def children_lock(parent_id: int) -> list[Task]:
    """Lock the parent's children (in id order, before the parent: the lock order)."""
    return list(Task.objects.select_for_update().filter(parent_id=parent_id).order_by("id"))


def children_propagate(
    *, parent_id: int, name: str, actor: User | None, reason: str = ""
) -> list[int]:
    """Apply transition `name` (pause, resume, abort) to every child it applies to, with an
    event naming the parent; returns the children moved. Resume brings back only children that
    were paused (a child stopped for a person stays stopped). Caller holds the transaction and
    has locked the children (`children_lock`) before the parent."""
    spec = TASK_TRANSITIONS[name]
    sources = {TaskStatus.PAUSED} if name == "resume" else spec.sources
    moved = []
    for child in Task.objects.filter(parent_id=parent_id, status__in=sources).order_by("id"):
        fields: dict[str, Any] = {"next_run_at": None, "failure": None} if name == "resume" else {}
        if task_transition(
            task_id=child.pk,
            name=name,
            actor=actor,
            payload={"propagated_from": parent_id, "reason": reason},
            **fields,
        ):
            moved.append(child.pk)
            gates.gates_withdraw(task_id=child.pk, because=name)
            if name == "resume":
                seq = Task.objects.filter(pk=child.pk).values_list("last_seq", flat=True).get()
                task_enqueue(child.pk, token=seq)
    return moved


def child_compensated_note(*, call_task_id: int, parent_id: int, key: str, by: str) -> None:
    """Record in a child's own log that its parent's rollback compensated one of its effects."""
    if call_task_id == parent_id:
        return
    task_append_event(
        task_id=call_task_id,
        event=EventSpec(
            "agentops.ledger.compensated",
            payload={"key": key, "by": by, "rolled_back_by_parent": parent_id},
        ),
    )


def fan_out_names() -> list[str]:
    return sorted(_FAN_OUTS)
