"""Agent handoff: a task hands its workflow state to another agent (for example triage -> refund).

A handoff step (`PlanStep(handoff=<agent>)`) does, in one fenced transaction: the task's agent
becomes the receiving agent; the receiving agent's plan is laid after the handoff step, minus the
steps whose tool already succeeded in this task (their recorded results carry over and satisfy
the dependencies that pointed at them); one `agentops.task.handed_off` event says what was
carried and what was added. The task row stays the same, so the ledger (and its idempotency keys),
the event log and the pinned policy version stay the same: the receiving agent starts from the
recorded progress, not from scratch. Idempotent: a worker killed after the commit finds the
handoff recorded and completes the step without adding the plan twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentops.engine.checkpoints import snapshot_write
from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import (
    AgentUnavailable,
    FailureKind,
    OrchestrationFailure,
    UnknownAgent,
)
from agentops.engine.needs import agent_check_available
from agentops.engine.planning import plan_check
from agentops.engine.registry import Agent, get_agent, plan_for, step_spec
from agentops.engine.transitions import EventSpec, Lease, fenced_write
from agentops.engine.versions import agent_version
from agentops.models import Step, Task
from agentops.states import StepStatus


@dataclass(frozen=True)
class HandedOff:
    """The receiving agent, the task's steps after the handoff, and the handoff step's output."""

    agent: Agent
    steps: list[Step]
    output: dict[str, Any]


def handoff_run(*, lease: Lease, task: Task, step: Step, steps: list[Step]) -> HandedOff:
    """Hand `task` over to the agent `step` names (lease holder; raises OrchestrationFailure
    for an unknown agent, or one whose needs this worker lacks)."""
    name = step.spec["handoff"]
    try:
        receiving = get_agent(name)
        agent_check_available(receiving)
    except (UnknownAgent, AgentUnavailable) as exc:
        raise OrchestrationFailure(
            str(exc), kind=FailureKind.UNKNOWN_AGENT, retryable=False
        ) from None
    if task.agent == receiving.name:
        # Recorded by an earlier holder that died before completing the step.
        output = _recorded_output(task)
        return HandedOff(receiving, steps, output)
    plan = plan_for(receiving, task.input)
    plan_check([p.depends_on for p in plan])
    done_by_tool = {
        s.spec.get("tool"): s.ordinal
        for s in steps
        if s.status == StepStatus.SUCCEEDED and s.spec.get("tool")
    }
    # Receiving plan index -> this task's ordinal (carried over, or newly added after the end).
    where: dict[int, int] = {}
    carried: list[dict[str, Any]] = []
    added: list[Step] = []
    next_ordinal = len(steps)
    for index, planned in enumerate(plan):
        if planned.tool in done_by_tool:
            where[index] = done_by_tool[planned.tool]
            carried.append({"step": where[index], "tool": planned.tool, "title": planned.title})
            continue
        where[index] = next_ordinal
        added.append(
            Step(
                task=task,
                ordinal=next_ordinal,
                title=planned.title,
                spec=step_spec(planned),
                depends_on=[where[dep] for dep in planned.depends_on],
            )
        )
        next_ordinal += 1
    output = {
        "handed_off_to": receiving.name,
        "from": task.agent,
        "carried": carried,
        "added": [s.ordinal for s in added],
    }
    event = EventSpec(
        "agentops.task.handed_off",
        step=step.ordinal,
        payload=output,
        fold={"steps": {str(s.ordinal): StepStatus.PENDING for s in added}},
    )
    with transaction.atomic():
        # The receiving agent's declaration is the one the task runs under from here.
        pin = agent_version(receiving).as_pin()
        seq = fenced_write(
            lease, [event], agent=receiving.name, agent_version=pin, step_count=next_ordinal
        )
        Step.objects.bulk_create(added)
        snapshot_write(task_id=task.pk, seq=seq)
    crashpoint("after_handoff", step=step.ordinal)
    task.agent = receiving.name
    task.agent_version = pin
    task.step_count = next_ordinal
    fresh = list(Step.objects.filter(task=task).order_by("ordinal"))
    # The run's view of the handoff step stays the object it is completing.
    merged = [step if s.pk == step.pk else s for s in fresh]
    return HandedOff(receiving, merged, output)


def _recorded_output(task: Task) -> dict[str, Any]:
    event = task.events.filter(action="agentops.task.handed_off").order_by("-seq").first()
    payload = dict(event.payload) if event is not None else {}
    payload.pop("fold", None)
    return payload
