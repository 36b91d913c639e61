"""Writes that people and scripts make on tasks. Each service owns its transaction.

The runner's own writes live in `agentops.engine`; these are the entry points from outside the
worker: create a task, pause it, resume it, abort it. Jobs are enqueued on commit.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agentops.engine.checkpoints import snapshot_state
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import AgentOpsError
from agentops.engine.jsonvalues import validated
from agentops.engine.registry import get_agent, plan_for
from agentops.engine.transitions import EventSpec, task_append_event, task_transition
from agentops.models import Snapshot, Step, Task
from agentops.states import TaskStatus


class TransitionRefused(AgentOpsError):
    """The task is not in a status this action applies to (someone else acted first)."""


def task_create(
    *,
    agent: str,
    goal: str,
    input: dict[str, Any] | None = None,
    created_by: Any = None,
    token_budget: int | None = None,
    wall_time_budget_seconds: int | None = None,
    step_retry_cap: int | None = None,
    recovery_cap: int | None = None,
) -> Task:
    """Create a task for a registered agent with its plan, an initial snapshot, and a job.

    Raises UnknownAgent for an unregistered agent and NotSerializable for non-JSON input.
    """
    from django.conf import settings

    spec = get_agent(agent)
    task_input = validated(input or {}, "input")
    goal = goal.strip()
    if not goal:
        raise ValueError("goal: a task needs a goal")
    conf = settings.AGENTOPS
    plan = plan_for(spec, task_input)
    with transaction.atomic():
        task = Task.objects.create(
            agent=spec.name,
            goal=goal,
            input=task_input,
            created_by=created_by if getattr(created_by, "pk", None) else None,
            step_count=len(plan),
            token_budget=token_budget,
            wall_time_budget_seconds=wall_time_budget_seconds,
            step_retry_cap=step_retry_cap or conf["STEP_RETRY_CAP"],
            recovery_cap=recovery_cap if recovery_cap is not None else conf["TASK_RECOVERY_CAP"],
        )
        steps = Step.objects.bulk_create(
            Step(
                task=task,
                ordinal=i,
                title=p.title,
                spec={"tool": p.tool},
                depends_on=list(p.depends_on),
            )
            for i, p in enumerate(plan)
        )
        Snapshot.objects.create(task=task, seq=0, state=snapshot_state(task, steps, []))
        seq = task_append_event(
            task_id=task.pk,
            event=EventSpec(
                "agentops.task.created", payload={"agent": spec.name, "steps": len(steps)}
            ),
            actor=created_by,
        )
        task_enqueue(task.pk, token=seq)
    return task


def _transition(task_id: int, name: str, *, actor: Any, reason: str = "", **fields: Any) -> None:
    with transaction.atomic():
        moved = task_transition(
            task_id=task_id,
            name=name,
            actor=actor,
            payload={"reason": reason} if reason else {},
            **fields,
        )
        if not moved:
            status = Task.objects.filter(pk=task_id).values_list("status", flat=True).first()
            raise TransitionRefused(f"task {task_id} is {status}; cannot {name.replace('_', ' ')}")
        if name == "resume":
            seq = Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()
            task_enqueue(task_id, token=seq)


def task_pause(*, task_id: int, actor: Any, reason: str = "") -> None:
    """Park a task for a person: any worker holding it loses its lease at its next write."""
    _transition(task_id, "pause", actor=actor, reason=reason)


def task_resume(*, task_id: int, actor: Any, reason: str = "") -> None:
    """Bring a parked task back to the queue and enqueue a job for it."""
    _transition(task_id, "resume", actor=actor, reason=reason, next_run_at=None)


def task_abort(*, task_id: int, actor: Any, reason: str = "") -> None:
    _transition(task_id, "abort", actor=actor, reason=reason)


__all__ = [
    "TaskStatus",
    "TransitionRefused",
    "task_abort",
    "task_create",
    "task_pause",
    "task_resume",
]
