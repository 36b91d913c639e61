"""Reads behind the agentops pages: the recent-task list and one task's full timeline.

Each selector runs a fixed number of queries whatever the size of the task (explicit
select_related/prefetch_related, events capped at the newest EVENT_LIMIT), so a page that polls
every second costs the same at step 2 and at step 200. Previews of stored JSON are plain strings;
templates autoescape them like any other untrusted text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from django.db.models import F, IntegerField, Prefetch, QuerySet
from django.db.models.functions import Least

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
from agentops.engine.errors import UnknownTool
from agentops.engine.jsonvalues import ARTIFACT_KEY, is_pointer
from agentops.engine.planning import preview_skip_with_dependants
from agentops.engine.registry import get_tool
from agentops.family import Family, has_fan_out_step, task_family
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import TERMINAL, TaskMode, TaskStatus

EVENT_LIMIT = 200
PREVIEW_CHARS = 160
# Statuses in which a task has stopped on a failure that a person should read.
STOPPED = frozenset({TaskStatus.NEEDS_ATTENTION, TaskStatus.RETRY_SCHEDULED})


def json_preview(value: Any, *, limit: int = PREVIEW_CHARS) -> str:
    """A one-line, length-capped rendering of a stored JSON value; artifacts by their pointer."""
    if value is None:
        return ""
    if is_pointer(value):
        return f"artifact {value[ARTIFACT_KEY]} ({value.get('size', '?')} bytes)"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _with_step_number(queryset: QuerySet[Task]) -> QuerySet[Task]:
    # 1-based "step k of n": the step being worked on, or the last one once all are done.
    return queryset.annotate(
        step_number=Least(F("current_step") + 1, F("step_count"), output_field=IntegerField())
    )


def tasks_visible_to(user: Any) -> QuerySet[Task]:
    """Every task for people who may read tasks (operators, auditors, admins: the
    `agentops.view_task` permission); for anyone else, the tasks they started. Others' tasks
    answer 404, as if they did not exist."""
    if user.has_perm("agentops.view_task"):
        return Task.objects.all()
    return Task.objects.filter(created_by=user.pk)


def task_list_recent(*, status: str | None = None, viewer: Any) -> QuerySet[Task]:
    """Tasks `viewer` may see, newest first, optionally only those in `status`; the caller
    paginates."""
    queryset = (
        tasks_visible_to(viewer)
        .only(
            "id",
            "agent",
            "goal",
            "status",
            "phase",
            "current_step",
            "step_count",
            "created_at",
            "updated_at",
        )
        .order_by("-id")
    )
    if status:
        queryset = queryset.filter(status=status)
    return _with_step_number(queryset)


@dataclass(frozen=True)
class StepRow:
    step: Step
    model_text: str
    output_preview: str
    error: dict[str, Any] | None


@dataclass(frozen=True)
class EventRow:
    event: Event
    payload_preview: str


@dataclass(frozen=True)
class TaskDetail:
    task: Task
    steps: list[StepRow]
    tool_calls: list[ToolCall]
    # Newest first, at most EVENT_LIMIT of them.
    events: list[EventRow]
    events_total: int
    attempts: int

    @property
    def is_terminal(self) -> bool:
        return self.task.status in TERMINAL

    @property
    def failure(self) -> dict[str, Any] | None:
        """The failure the task stopped on, when it is stopped on one."""
        if self.task.status in STOPPED and isinstance(self.task.failure, dict):
            return self.task.failure
        return None

    @cached_property
    def recovery(self) -> Recovery | None:
        """The advisor's recommendation when the task is stopped for a person."""
        return task_recovery(self.task, [row.step for row in self.steps], self.tool_calls)

    @cached_property
    def family(self) -> Family | None:
        """Parent and child tasks, for a task that has either (no query otherwise)."""
        return task_family(self.task, has_fan_out=has_fan_out_step([r.step for r in self.steps]))

    @property
    def retry_at(self) -> datetime | None:
        if self.task.status == TaskStatus.RETRY_SCHEDULED:
            return self.task.next_run_at
        return None


def _step_row(step: Step) -> StepRow:
    response = step.model_response
    text = (
        response.get("text", "") if isinstance(response, dict) and not is_pointer(response) else ""
    )
    return StepRow(
        step=step,
        model_text=json_preview(text) if text else "",
        output_preview=json_preview(step.output),
        error=step.error if isinstance(step.error, dict) else None,
    )


def _event_row(event: Event) -> EventRow:
    # `fold` is the replay bookkeeping of checkpoints; the rest is what happened.
    payload = {k: v for k, v in (event.payload or {}).items() if k != "fold"}
    return EventRow(event=event, payload_preview=json_preview(payload) if payload else "")


def task_get_detail(*, task_id: int, viewer: Any) -> TaskDetail:
    """One task with its steps, ledger rows and newest events, in four queries.

    Raises Task.DoesNotExist for an unknown id.
    """
    task = (
        _with_step_number(tasks_visible_to(viewer).select_related("created_by"))
        .prefetch_related(
            Prefetch("steps", queryset=Step.objects.order_by("ordinal"), to_attr="step_list"),
            Prefetch(
                "tool_calls",
                queryset=ToolCall.objects.defer("args", "result")
                .annotate(step_ordinal=F("step__ordinal"))
                .order_by("id"),
                to_attr="call_list",
            ),
            Prefetch(
                "events",
                queryset=Event.objects.order_by("-seq")[:EVENT_LIMIT],
                to_attr="event_list",
            ),
        )
        .get(pk=task_id)
    )
    steps: list[Step] = task.step_list  # type: ignore[attr-defined]
    return TaskDetail(
        task=task,
        steps=[_step_row(s) for s in steps],
        tool_calls=task.call_list,  # type: ignore[attr-defined]
        events=[_event_row(e) for e in task.event_list],  # type: ignore[attr-defined]
        # Seqs are gapless from 1, so the last one is the count.
        events_total=task.last_seq,
        attempts=sum(s.attempts for s in steps),
    )


@dataclass(frozen=True)
class Recovery:
    """What the advisor recommends for a stopped task, and what each option would do."""

    recommendation: Recommendation
    previews: dict[str, Preview]
    stuck_step: Step | None
    breakpoint: str


def _tool_facts(name: str) -> tuple[str | None, bool]:
    """The tool's side-effect class and whether it can be compensated (None: unknown tool)."""
    try:
        tool = get_tool(name)
    except UnknownTool:
        return None, False
    return tool.side_effect, tool.compensate_with is not None


def task_recovery(task: Task, steps: list[Step], calls: list[ToolCall]) -> Recovery | None:
    """Advise on a task stopped in needs_attention, from rows already loaded by the caller."""
    if task.status != TaskStatus.NEEDS_ATTENTION or not isinstance(task.failure, dict):
        return None
    stuck = next((s for s in steps if s.status in {"failed", "running"}), None)
    stuck_calls = [c for c in calls if stuck is not None and c.step_id == stuck.pk]
    side_effect = stuck_calls[-1].side_effect if stuck_calls else None
    if side_effect is None and stuck is not None and stuck.spec.get("tool"):
        side_effect, _ = _tool_facts(stuck.spec["tool"])
    ledger = []
    for call in calls:
        call_side_effect, compensable = _tool_facts(call.tool)
        ledger.append(
            LedgerView(
                key=call.idempotency_key,
                tool=call.tool,
                status=call.status,
                side_effect=call_side_effect or call.side_effect,
                compensable=compensable,
                compensates=None
                if call.compensation_of_id is None
                else str(call.compensation_of_id),
            )
        )
    views = [StepView(s.ordinal, s.title, s.status) for s in steps]
    situation = situation_from(
        failure=task.failure,
        side_effect=side_effect,
        steps=views,
        ledger=ledger,
        step_attempts=stuck.attempts if stuck else 0,
        step_retry_cap=task.step_retry_cap,
        task_recoveries=task.recoveries,
        task_recovery_cap=task.recovery_cap,
        rolling_back=task.mode == TaskMode.ROLLBACK,
    )
    recommendation = advise(situation)
    previews = {
        str(option): preview(option, views, ledger)
        for option in recommendation.options
        if option != Action.CONFIRM
    }
    if stuck is not None and "skip" in previews:
        previews["skip"] = preview_skip_with_dependants(previews["skip"], steps, stuck.ordinal)
    position = stuck.ordinal + 1 if stuck else min(task.current_step + 1, task.step_count)
    phase = task.get_phase_display() if task.phase else "not started"
    return Recovery(
        recommendation=recommendation,
        previews=previews,
        stuck_step=stuck,
        breakpoint=f"step {position} of {task.step_count}, {phase.lower()}",
    )


def task_get_recovery(*, task_id: int) -> Recommendation | None:
    """The advisor's recommendation for a stopped task (None when it is not stopped)."""
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    calls = list(ToolCall.objects.filter(task=task).order_by("id"))
    recovery = task_recovery(task, steps, calls)
    return recovery.recommendation if recovery else None
