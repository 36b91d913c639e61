"""Reads behind the agentops pages: the recent-task list and one task's full timeline.

Each selector runs a fixed number of queries whatever the size of the task (explicit
select_related/prefetch_related, events capped at the newest EVENT_LIMIT), so a page that polls
every second costs the same at step 2 and at step 200. Previews of stored JSON are plain strings;
templates autoescape them like any other untrusted text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.db.models import Count, F, IntegerField, OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.functions import Coalesce, Least

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
from agentops.engine.errors import FailureKind, UnknownTool
from agentops.engine.jsonvalues import ARTIFACT_KEY, is_pointer
from agentops.engine.planning import preview_skip_with_dependants
from agentops.engine.registry import get_tool
from agentops.family import Family, has_fan_out_step, task_family
from agentops.models import Artifact, Event, Step, Task, ToolCall
from agentops.states import TERMINAL, LedgerStatus, TaskMode, TaskStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User

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


def tasks_visible_to(user: User) -> QuerySet[Task]:
    """Every task for people who may read tasks (operators, auditors, admins: the
    `agentops.view_task` permission); for anyone else, the tasks they started. Others' tasks
    answer 404, as if they did not exist."""
    if user.has_perm("agentops.view_task"):
        return Task.objects.all()
    return Task.objects.filter(created_by=user.pk)


def task_list_recent(*, status: str | None = None, viewer: User) -> QuerySet[Task]:
    """Tasks `viewer` may see, newest first, optionally only those in `status`; the caller
    takes a window of it (agentops.paging: no count of the whole list)."""
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
    # A subquery per shown row (a partial index holds the compensated calls), not a join of
    # every task with every ledger row grouped before the LIMIT.
    undone = (
        ToolCall.objects.filter(task=OuterRef("pk"), status=LedgerStatus.COMPENSATED)
        .order_by()
        .values("task")
        .annotate(n=Count("*"))
        .values("n")
    )
    return _with_step_number(queryset).annotate(
        compensated_calls=Coalesce(Subquery(undone, output_field=IntegerField()), 0)
    )


@dataclass(frozen=True)
class StepRow:
    step: Step
    model_text: str
    output_preview: str
    error: dict[str, Any] | None
    output_artifact: int | None = None


@dataclass(frozen=True)
class EventRow:
    event: Event
    payload_preview: str


@dataclass(frozen=True)
class TaskDetail:
    task: Task
    steps: list[StepRow]
    tool_calls: Sequence[ToolCall]
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
        return task_recovery(
            self.task,
            [row.step for row in self.steps],
            self.tool_calls,
            [row.event for row in self.events],
        )

    @cached_property
    def family(self) -> Family | None:
        """Parent and child tasks, for a task that has either (no query otherwise)."""
        return task_family(self.task, has_fan_out=has_fan_out_step([r.step for r in self.steps]))

    @property
    def retry_at(self) -> datetime | None:
        if self.task.status == TaskStatus.RETRY_SCHEDULED:
            return self.task.next_run_at
        return None


def step_row(step: Step, *, limit: int = PREVIEW_CHARS) -> StepRow:
    """A step as every page shows it: the model's text, the output and the error, previewed in
    at most `limit` characters each, and the artifact holding a large output."""
    response = step.model_response
    text = (
        response.get("text", "") if isinstance(response, dict) and not is_pointer(response) else ""
    )
    return StepRow(
        step=step,
        model_text=json_preview(text, limit=limit) if text else "",
        output_preview=json_preview(step.output, limit=limit),
        error=step.error if isinstance(step.error, dict) else None,
        output_artifact=artifact_id_of(step.output),
    )


def _event_row(event: Event) -> EventRow:
    # `fold` is the replay bookkeeping of checkpoints; the rest is what happened.
    payload = {k: v for k, v in (event.payload or {}).items() if k != "fold"}
    return EventRow(event=event, payload_preview=json_preview(payload) if payload else "")


def mark_compensated(steps: list[Step], calls: Sequence[ToolCall]) -> None:
    """Mark steps whose effect a rollback undid (`step.compensated`), so every view shows them
    as compensated rather than succeeded."""
    undone = {c.step_id for c in calls if c.status == LedgerStatus.COMPENSATED}
    for step in steps:
        step.compensated = step.pk in undone  # type: ignore[attr-defined]


def task_get_detail(*, task_id: int, viewer: User) -> TaskDetail:
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
    steps: list[Step] = task.step_list
    mark_compensated(steps, task.call_list)
    # One attempt counter: every start of a step, manual retries included (a retry resets the
    # step's `attempts`, which counts the current round against the cap).
    events: list[Event] = task.event_list
    for step in steps:
        step.attempts_total = max(  # type: ignore[attr-defined]
            step.attempts, step_attempts_total(events, ordinal=step.ordinal)
        )
    return TaskDetail(
        task=task,
        steps=[step_row(s) for s in steps],
        tool_calls=task.call_list,
        events=[_event_row(e) for e in task.event_list],
        # Seqs are gapless from 1, so the last one is the count.
        events_total=task.last_seq,
        attempts=sum(s.attempts_total for s in steps),  # type: ignore[attr-defined]
    )


@dataclass(frozen=True)
class Recovery:
    """What the advisor recommends for a stopped task, and what each option would do."""

    recommendation: Recommendation
    previews: dict[str, Preview]
    stuck_step: Step | None
    breakpoint: str
    # Every attempt of the stuck step, manual retries included (`stuck_step.attempts` counts
    # the current round against the cap), and the manual retries that failed the same way.
    attempts_total: int = 0
    failed_retries: int = 0


@dataclass(frozen=True)
class ToolFacts:
    """What the registry says about a tool: what running (or approving) its call sets in motion."""

    name: str
    known: bool
    side_effect: str
    systems: tuple[str, ...]
    idempotent_remote: bool
    compensate_with: str | None

    @property
    def compensable(self) -> bool:
        return self.compensate_with is not None


def tool_facts(name: str, *, recorded_side_effect: str = "") -> ToolFacts:
    """The registered tool's facts; an unknown tool (no longer registered) is known by the side
    effect its ledger row recorded, else "unknown"."""
    try:
        tool = get_tool(name)
    except UnknownTool:
        return ToolFacts(name, False, recorded_side_effect or "unknown", (), False, None)
    return ToolFacts(
        name, True, tool.side_effect, tool.systems, tool.idempotent_remote, tool.compensate_with
    )


def retries_failed_again(events: list[Event], *, ordinal: int, kind: str) -> int:
    """How many manual retries of step `ordinal` ended in a failure of the same `kind`: each
    retry (a step reset by the retry intervention) is judged by the step's next failure."""
    count, waiting = 0, False
    for event in sorted(events, key=lambda e: e.seq):
        if event.step_ordinal != ordinal:
            continue
        payload = event.payload or {}
        if event.action == "agentops.step.reset" and payload.get("intervention") == "retry":
            waiting = True
        elif event.action == "agentops.step.failed" and waiting:
            waiting = False
            if (payload.get("failure") or {}).get("kind") == kind:
                count += 1
    return count


def step_attempts_total(events: list[Event], *, ordinal: int) -> int:
    """Every start of step `ordinal`, across manual retries (its `attempts` counts one round)."""
    return sum(
        1 for e in events if e.step_ordinal == ordinal and e.action == "agentops.step.started"
    )


def breakpoint_where(task: Task, stuck: Step | None, calls: list[ToolCall]) -> str:
    """Where the task really stopped relative to its tool call: before it (nothing sent), during
    it (outcome unknown), or after it (refused or failed, with why)."""
    if stuck is None:
        phase = task.get_phase_display() if task.phase else "not started"
        return phase.lower()
    live = [c for c in calls if c.step_id == stuck.pk and c.compensation_of_id is None]
    if not live:
        return "before the tool call: nothing was sent"
    last = live[-1]
    failure = task.failure if isinstance(task.failure, dict) else {}
    kind = str(failure.get("kind") or "").replace("_", " ")
    if last.status == LedgerStatus.EXECUTED_UNKNOWN:
        return "during the tool call: sent, outcome unknown"
    if last.status == LedgerStatus.PENDING:
        return "during the tool call: sent, outcome not recorded yet"
    if last.status == LedgerStatus.FAILED:
        if failure.get("kind") in REFUSED_KINDS:
            return f"after the tool call: the service refused it ({kind})"
        return f"after the tool call: it failed ({kind or 'error'}), no effect recorded"
    return "after the tool call: it succeeded, the step did not complete"


# Failure kinds where the service answered and said no: the call ran and was refused.
REFUSED_KINDS = frozenset(
    {
        FailureKind.AUTHORIZATION_GAP,
        FailureKind.BAD_REQUEST,
        FailureKind.CONFLICT,
        FailureKind.SCHEMA_MISMATCH,
    }
)


def task_recovery(
    task: Task, steps: list[Step], calls: Sequence[ToolCall], events: list[Event] | None = None
) -> Recovery | None:
    """Advise on a task stopped in needs_attention, from rows already loaded by the caller.

    `events` (the task's newest events) let the advisor see manual retries that already failed
    the same way, and count every attempt of the stuck step."""
    if task.status != TaskStatus.NEEDS_ATTENTION or not isinstance(task.failure, dict):
        return None
    stuck = next((s for s in steps if s.status in {"failed", "running"}), None)
    stuck_calls = [c for c in calls if stuck is not None and c.step_id == stuck.pk]
    side_effect = stuck_calls[-1].side_effect if stuck_calls else None
    if side_effect is None and stuck is not None and stuck.spec.get("tool"):
        stuck_tool = tool_facts(stuck.spec["tool"])
        side_effect = stuck_tool.side_effect if stuck_tool.known else None
    ledger = []
    for call in calls:
        facts = tool_facts(call.tool, recorded_side_effect=call.side_effect)
        ledger.append(
            LedgerView(
                key=call.idempotency_key,
                tool=call.tool,
                status=call.status,
                side_effect=facts.side_effect if facts.known else call.side_effect,
                compensable=facts.compensable,
                compensates=None
                if call.compensation_of_id is None
                else str(call.compensation_of_id),
            )
        )
    views = [StepView(s.ordinal, s.title, s.status) for s in steps]
    kind = str(task.failure.get("kind") or "")
    failed_retries = (
        retries_failed_again(events, ordinal=stuck.ordinal, kind=kind)
        if events is not None and stuck is not None
        else 0
    )
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
        failed_retries=failed_retries,
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
    total = (
        step_attempts_total(events, ordinal=stuck.ordinal)
        if events is not None and stuck is not None
        else (stuck.attempts if stuck else 0)
    )
    where = breakpoint_where(task, stuck, list(calls))
    return Recovery(
        recommendation=recommendation,
        previews=previews,
        stuck_step=stuck,
        breakpoint=f"step {position} of {task.step_count}, {where}",
        attempts_total=max(total, stuck.attempts if stuck else 0),
        failed_retries=failed_retries,
    )


def task_get_recovery(*, task_id: int) -> Recommendation | None:
    """The advisor's recommendation for a stopped task (None when it is not stopped)."""
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    calls = list(ToolCall.objects.filter(task=task).order_by("id"))
    events = list(Event.objects.filter(task=task).order_by("-seq")[:EVENT_LIMIT])
    recovery = task_recovery(task, steps, calls, events)
    return recovery.recommendation if recovery else None


def artifact_get_visible(*, artifact_id: int, viewer: User) -> Artifact:
    """An artifact of a task `viewer` may read; raises Task.DoesNotExist otherwise (404)."""
    found = Artifact.objects.filter(
        pk=artifact_id, task__in=tasks_visible_to(viewer).values("pk")
    ).first()
    if found is None:
        raise Task.DoesNotExist(f"no artifact {artifact_id}")
    return found


def artifact_id_of(value: Any) -> int | None:
    """The artifact id of a stored pointer (None for an inline value)."""
    return int(value[ARTIFACT_KEY]) if is_pointer(value) else None
