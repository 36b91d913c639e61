"""Limits that stop a run before it spends more: the task's budgets (tokens, cost, worked wall
time), a planning loop (the same action proposed again and again) and a confidence collapse.

Each check raises `OrchestrationFailure` with its kind; the runner stops the task with it. The
checks read rows the runner already holds (worked time reads the task's claim events).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from agentops.engine.errors import FailureKind, OrchestrationFailure
from agentops.engine.jsonvalues import loaded
from agentops.engine.ledger import arguments_digest
from agentops.engine.model import ModelResponse
from agentops.engine.registry import Agent, Tool
from agentops.engine.transitions import prepared_rows
from agentops.models import Event, Step, Task
from agentops.states import STEP_DONE, TASK_TRANSITIONS, TaskStatus

CLAIMED = TASK_TRANSITIONS["start"].event
# Events after which nobody works on the task until the next claim: every move out of
# `running` (a parent waiting for its children included).
LEFT_RUNNING = frozenset(
    t.event
    for t in TASK_TRANSITIONS.values()
    if TaskStatus.RUNNING in t.sources and t.target != TaskStatus.RUNNING
)


def worked_seconds(task_id: int) -> float:
    """How long the task has been worked on: from each claim until it left `running` (parked at
    a gate, waiting for a retry, paused, stopped, yielded) or until the next claim (its worker
    died), and the current claim until now. Waits for people and backoff do not count."""
    total, since = 0.0, None
    rows = prepared_rows(_worked_events(), [task_id, sorted(LEFT_RUNNING | {CLAIMED})])
    for action, at in rows:
        if since is not None:
            total += (at - since).total_seconds()
            since = None
        if action == CLAIMED:
            since = at
    if since is not None:
        total += (timezone.now() - since).total_seconds()
    return total


@functools.cache
def _worked_events() -> str:
    """The task's claims and moves out of `running` (action, time), in seq order."""
    return (
        f'SELECT "action", "created_at" FROM "{Event._meta.db_table}" WHERE "task_id" = %s '
        'AND "action" = ANY(CAST(%s AS text[])) ORDER BY "seq"'
    )


def check_budgets(task: Task, *, worked: Callable[[], float] | None = None) -> None:
    """Raise budget_overflow when the task has used up its tokens, cost or worked time.

    `worked` gives the worked seconds (default: `worked_seconds`, from the event log); the
    runner passes its own clock, read from the log once per claim."""
    if task.token_budget is not None and task.tokens_used >= task.token_budget:
        raise OrchestrationFailure(
            f"token budget used up ({task.tokens_used} of {task.token_budget})",
            kind=FailureKind.BUDGET_OVERFLOW,
            detail={"budget": "tokens"},
        )
    if task.cost_budget is not None and task.cost_used >= task.cost_budget:
        raise OrchestrationFailure(
            f"cost budget used up ({task.cost_used:.4f} of {task.cost_budget})",
            kind=FailureKind.BUDGET_OVERFLOW,
            detail={"budget": "cost"},
        )
    if task.wall_time_budget_seconds and task.started_at:
        elapsed = worked() if worked is not None else worked_seconds(task.pk)
        if elapsed > task.wall_time_budget_seconds:
            raise OrchestrationFailure(
                f"wall-time budget used up ({elapsed:.0f} s of {task.wall_time_budget_seconds} s)",
                kind=FailureKind.BUDGET_OVERFLOW,
                detail={"budget": "wall_time"},
            )


def check_loop(
    proposals: dict[tuple[str, str], set[int]],
    step: Step,
    tool: Tool,
    arguments: dict[str, Any],
    *,
    digest: str | None = None,
) -> None:
    """The same tool with the same arguments, proposed again and again, is a planning loop.

    `proposals` maps (tool, args digest) to the steps that proposed it (the runner keeps it);
    `digest` is the arguments' digest when the caller has it already."""
    threshold = settings.AGENTOPS["LOOP_THRESHOLD"]
    digest = arguments_digest(arguments) if digest is None else digest
    steps = proposals.get((tool.name, digest), set())
    earlier = len(steps - {step.pk})
    if earlier + 1 >= threshold:
        raise OrchestrationFailure(
            f"{tool.name} was proposed with the same arguments in {earlier + 1} steps "
            f"(loop threshold {threshold})",
            kind=FailureKind.PLANNING_LOOP,
        )


def check_confidence(agent: Agent, steps: list[Step], step: Step, response: ModelResponse) -> None:
    """Confidence collapse: the model stayed below the agent's floor for N consecutive
    steps (this one included). A single low-confidence action is the policy's to gate."""
    conf = settings.AGENTOPS
    floor = agent.confidence_floor
    floor = conf["CONFIDENCE_FLOOR"] if floor is None else floor
    needed = conf["CONFIDENCE_COLLAPSE_STEPS"]
    if needed <= 0 or response.confidence is None or response.confidence >= floor:
        return
    run = [response.confidence]
    for earlier in sorted(
        (s for s in steps if s.ordinal < step.ordinal and s.status in STEP_DONE),
        key=lambda s: s.ordinal,
        reverse=True,
    ):
        record = loaded(earlier.model_response) if earlier.model_response else None
        confidence = record.get("confidence") if isinstance(record, dict) else None
        if confidence is None or confidence >= floor:
            break
        run.append(float(confidence))
    if len(run) >= needed:
        raise OrchestrationFailure(
            f"confidence collapse: the model's confidence stayed below {floor:g} for "
            f"{len(run)} consecutive steps (latest {run[0]:g}; threshold {needed})",
            kind=FailureKind.LOW_CONFIDENCE,
            detail={"floor": floor, "steps": len(run), "confidences": run[::-1]},
        )
