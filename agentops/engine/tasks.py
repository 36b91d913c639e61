"""Task creation: a registered agent's task with its plan, its first snapshot and its job.

The engine owns it because the engine itself creates tasks (a fan-out step's children); the
start form and the API call it, through the engine's front door, with the person asking.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.db import transaction

from agentops.engine.checkpoints import snapshot_state
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import StartRefused
from agentops.engine.jsonvalues import redacted, validated
from agentops.engine.needs import agent_check_available
from agentops.engine.planning import plan_check
from agentops.engine.registry import get_agent, plan_for, step_spec
from agentops.engine.transitions import EventSpec, task_append_event
from agentops.engine.versions import agent_version
from agentops.models import Snapshot, Step, Task
from agentops.plumbing import tracing
from policies.services import policy_version_ensure_active

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class TaskOrigin(Protocol):
    """Where a task started again or forked comes from (`engine/origins.py: Origin`)."""

    @property
    def task(self) -> Task: ...
    @property
    def kind(self) -> str: ...
    @property
    def from_step(self) -> int | None: ...
    def adopt(self, steps: list[Step]) -> None: ...
    def event_payload(self) -> dict[str, Any]: ...


# Declared by `agentops.permissions` (the task starters' role); asked through Django here.
START_TASK = "agentops.start_task"


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
    origin: TaskOrigin | None = None,
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
    Raises UnknownAgent for an unregistered agent, AgentUnavailable (naming each missing
    setting) for one whose needs this process lacks (`engine.needs`), NotSerializable (with the
    path) for input or a goal that cannot be stored (not JSON, a NUL character, a lone
    surrogate, nesting deeper than `jsonvalues.MAX_DEPTH`) and PlanInvalid for a plan whose
    dependencies do not point at earlier steps. `origin`: the task is started again from, or
    forked from, another one (`engine/origins.py`); it links them and may adopt the first
    steps' results.
    """
    if started_by is not None:
        if not started_by.has_perm(START_TASK):
            raise StartRefused(started_by.get_username() or "an anonymous user")
        created_by = started_by

    spec = get_agent(agent)
    agent_check_available(spec)
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
            agent_version=agent_version(spec).as_pin(),
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
            trace_context=tracing.task_trace_context(parent),
            origin=origin.task if origin is not None else None,
            origin_kind=origin.kind if origin is not None else "",
            origin_step=origin.from_step if origin is not None else None,
            current_step=(origin.from_step or 0) if origin is not None else 0,
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
        if origin is not None:
            origin.adopt(steps)
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
                    **(origin.event_payload() if origin is not None else {}),
                },
            ),
            actor=created_by,
        )
        task_enqueue(task.pk, token=seq)
    return task
