"""Row factories for read-side tests: a task waiting at a gate and a task stopped for a person,
written straight into the tables in the shape the engine leaves them, without running it.

A test of what a page, a selector or an export shows needs the rows, not the engine that makes
them (tests/reviews/builders.py runs the engine, for tests of what happens next: a decision, a
retry, a rollback). Tasks are made by `task_create` (the agent's plan, the pinned policy, the
`agentops.task.created` event) and walked to their status along legal transitions
(tests/statuses.py); the gate and the failure carry what the refund and trip agents produce on
the default policy (tests/reviews/builders.py's `gated_refund` and `stopped_trip`).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from agentops.engine import task_create
from agentops.engine.jsonvalues import digest
from agentops.models import Gate, Step, Task
from agentops.states import StepStatus, TaskStatus
from tests.statuses import status_walk

GATE_SECONDS = 3600  # the default policy's gate timeout


def _steps_walked(task: Task, *, done: int, current: str) -> Step:
    """Steps before `done` succeeded, step `done` in `current`; the task's current step is it."""
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    for step in steps[:done]:
        status_walk(step, StepStatus.SUCCEEDED)
    status_walk(steps[done], current)
    Task.objects.filter(pk=task.pk).update(current_step=done)
    task.current_step = done
    return steps[done]


def _task_in(task: Task, status: str, **fields: Any) -> Task:
    """`task` walked to `status`, which it entered now."""
    status_walk(task, status)
    now = timezone.now()
    Task.objects.filter(pk=task.pk).update(status_changed_at=now, **fields)
    task.refresh_from_db()
    return task


def gated_refund_row(
    *,
    created_by: Any = None,
    order_id: str = "B2002",
    amount: float = 108.0,
    goal: str = "",
    due_in: timedelta = timedelta(seconds=GATE_SECONDS),
) -> Task:
    """A refund waiting at its payment gate: the look-ups done, the refund step running, and
    an open gate on `issue_refund` (rule "large payment", due in the policy's hour)."""
    task = task_create(
        agent="refund",
        goal=goal or f"Refund order {order_id}",
        input={"order_id": order_id},
        created_by=created_by,
    )
    step = _steps_walked(task, done=3, current=StepStatus.RUNNING)
    task = _task_in(task, TaskStatus.AWAITING_APPROVAL)
    arguments = {"amount": amount, "currency": "EUR", "order_id": order_id}
    Gate.objects.create(
        task=task,
        step=step,
        tool="issue_refund",
        side_effect="financial",
        arguments=arguments,
        args_digest=digest(arguments),
        amount=Decimal(str(amount)),
        confidence=0.93,
        policy_version=task.policy_version,
        policy_version_number=task.policy_version.number if task.policy_version else None,
        rule="large payment",
        reasons=[
            "rule 4 'large payment' is the first that matches",
            "tool issue_refund has side effect financial",
            f"amount {amount:g} is above 100",
        ],
        due_at=timezone.now() + due_in,
    )
    return task


def stopped_trip_row(*, created_by: Any = None, goal: str = "Trip to Lisbon") -> Task:
    """A trip stopped in needs_attention when the hotel refused its booking (403: an
    authorization gap), after the flight was booked."""
    task = task_create(agent="trip", goal=goal, input={"traveller": "Ada"}, created_by=created_by)
    failure = {
        "kind": "authorization_gap",
        "mode": "authorization",
        "layer": "tool",
        "nature": "logic",
        "message": "hotels.book refused: 403 forbidden: the caller may not do this",
        "retryable": False,
        "retry_after": None,
    }
    step = _steps_walked(task, done=2, current=StepStatus.FAILED)
    Step.objects.filter(pk=step.pk).update(error=failure)
    return _task_in(task, TaskStatus.NEEDS_ATTENTION, failure=failure)
