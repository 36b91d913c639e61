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
from typing import Any

from django.db.models import F, IntegerField, Prefetch, QuerySet
from django.db.models.functions import Least

from agentops.engine.jsonvalues import ARTIFACT_KEY, is_pointer
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import TERMINAL, TaskStatus

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


def task_list_recent(*, status: str | None = None) -> QuerySet[Task]:
    """Tasks newest first, optionally only those in `status`; the caller paginates."""
    queryset = Task.objects.only(
        "id", "agent", "goal", "status", "phase", "current_step", "step_count", "created_at",
        "updated_at",
    ).order_by("-id")
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

    @property
    def retry_at(self) -> datetime | None:
        if self.task.status == TaskStatus.RETRY_SCHEDULED:
            return self.task.next_run_at
        return None


def _step_row(step: Step) -> StepRow:
    response = step.model_response
    text = response.get("text", "") if isinstance(response, dict) and not is_pointer(response) else ""
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


def task_get_detail(*, task_id: int) -> TaskDetail:
    """One task with its steps, ledger rows and newest events, in four queries.

    Raises Task.DoesNotExist for an unknown id.
    """
    task = (
        _with_step_number(Task.objects.select_related("created_by"))
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
