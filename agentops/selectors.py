"""Reads behind the agentops pages: the recent-task list and one task's full timeline.

Each selector runs a fixed number of queries whatever the size of the task (explicit
select_related/prefetch_related, events capped at the newest EVENT_LIMIT), so a page that polls
every second costs the same at step 2 and at step 200. Previews of stored JSON are plain strings;
templates autoescape them like any other untrusted text. The recovery of a stopped task is the
engine's rule (`agentops.engine.recovery`): these reads load its rows and call it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Prefetch,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Least
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agentops.engine.advisor import Recommendation
from agentops.engine.context import summary_line
from agentops.engine.jsonvalues import ARTIFACT_KEY, is_pointer
from agentops.engine.recovery import Recovery, step_attempts_total, task_recovery
from agentops.family import Family, has_fan_out_step, task_family
from agentops.models import ArchivedTask, Artifact, Event, Step, Task, ToolCall
from agentops.plumbing.paging import window
from agentops.plumbing.web import poll_version
from agentops.states import STEP_DONE, TERMINAL, LedgerStatus, TaskStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User

EVENT_LIMIT = 200
PREVIEW_CHARS = 160
# Statuses in which a task has stopped on a failure that a person should read.
STOPPED = frozenset({TaskStatus.NEEDS_ATTENTION, TaskStatus.RETRY_SCHEDULED})
# The event of the abort transition; its payload says when a person cancelled the task.
ABORTED_EVENT = "agentops.task.aborted"
# What people call an aborted task a person cancelled (the stored status stays `aborted`): its
# name in the task list's status filter, and its label.
CANCELLED, CANCELLED_LABEL = "cancelled", gettext_lazy("Cancelled")


def status_label(task: Task, *, cancelled: bool) -> str:
    """The task's status as people name it: "Cancelled" for an aborted task a person cancelled
    (`cancelled`: its abort event says so), else the status's own label."""
    if cancelled and task.status == TaskStatus.ABORTED:
        return str(CANCELLED_LABEL)
    return str(task.get_status_display())


def _cancelled() -> Exists:
    """Whether the task's abort event says a person cancelled it (an index leads with the task)."""
    return Exists(
        Event.objects.filter(task=OuterRef("pk"), action=ABORTED_EVENT, payload__cancelled=True)
    )


def _status_filtered(queryset: QuerySet[Task], status: str) -> QuerySet[Task]:
    """Tasks shown with `status`: "cancelled" is an aborted task a person cancelled, and
    "aborted" then leaves those out, as the list labels them."""
    if status == CANCELLED:
        return queryset.filter(_cancelled(), status=TaskStatus.ABORTED)
    if status == TaskStatus.ABORTED:
        return queryset.filter(~_cancelled(), status=TaskStatus.ABORTED)
    return queryset.filter(status=status)


def json_preview(value: Any, *, limit: int = PREVIEW_CHARS) -> str:
    """A one-line, length-capped rendering of a stored JSON value; artifacts by their pointer."""
    if value is None:
        return ""
    if is_pointer(value):
        return _("artifact %(id)s (%(size)s bytes)") % {
            "id": value[ARTIFACT_KEY],
            "size": value.get("size", "?"),
        }
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _with_step_number(queryset: QuerySet[Task]) -> QuerySet[Task]:
    # 1-based "step k of n": the step being worked on, or the last one once all are done.
    return queryset.annotate(
        step_number=Least(F("current_step") + 1, F("step_count"), output_field=IntegerField())
    )


def may_read_every_task(user: User) -> bool:
    """Operators, auditors and admins (the `agentops.view_task` permission) read every task;
    anyone else only the tasks they started."""
    return bool(user.has_perm("agentops.view_task"))


def tasks_visible_to(user: User) -> QuerySet[Task]:
    """Every task for people who may read tasks (`may_read_every_task`); for anyone else, the
    tasks they started. Others' tasks answer 404, as if they did not exist."""
    if may_read_every_task(user):
        return Task.objects.all()
    return Task.objects.filter(created_by=user.pk)


def archived_task_visible_to(user: User, task_id: int) -> ArchivedTask | None:
    """Where task `task_id` went, if retention archived and removed it and `user` could have
    seen it (`tasks_visible_to`'s rule): None otherwise, so that others' tasks still answer 404."""
    archived = ArchivedTask.objects.filter(task_id=task_id).first()
    if archived is None:
        return None
    if may_read_every_task(user) or archived.created_by_id == user.pk:
        return archived
    return None


def archived_task_words(archived: ArchivedTask) -> str:
    """What a person is told of an archived task: when it went, where, and how to read it (in
    the reader's language; the date, the archive and the command stay as written)."""
    return _(
        "task %(id)s was archived on %(date)s to %(archive)s and removed from the database; "
        "`manage.py retention --show %(archive)s %(id)s` shows it"
    ) % {
        "id": archived.task_id,
        "date": f"{archived.archived_at:%Y-%m-%d}",
        "archive": archived.archive,
    }


def task_list_recent(*, status: str | None = None, viewer: User) -> QuerySet[Task]:
    """Tasks `viewer` may see, newest first, optionally only those shown with `status` (a
    stored status, or "cancelled"), each with `cancelled` (`status_label`); the caller takes a
    window of it (agentops.plumbing.paging: no count of the whole list)."""
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
            "last_seq",
        )
        .order_by("-id")
    )
    if status:
        queryset = _status_filtered(queryset, status)
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
        compensated_calls=Coalesce(Subquery(undone, output_field=IntegerField()), 0),
        cancelled=Case(
            When(status=TaskStatus.ABORTED, then=_cancelled()),
            default=Value(False),
            output_field=BooleanField(),
        ),
    )


@dataclass(frozen=True)
class LedgerRow:
    """A ledger row as the ledger table shows it: which try of its idempotency key it is (a
    failed try stays as history, and the retry reuses its key)."""

    call: ToolCall
    try_number: int
    tries: int


def ledger_rows(calls: Iterable[ToolCall]) -> list[LedgerRow]:
    """`calls` in their order, each numbered among the rows of its key, oldest first."""
    calls = list(calls)
    ids_by_key: dict[str, list[int]] = {}
    for call in sorted(calls, key=lambda c: c.pk):
        ids_by_key.setdefault(call.idempotency_key, []).append(call.pk)
    return [
        LedgerRow(
            call=call,
            try_number=ids_by_key[call.idempotency_key].index(call.pk) + 1,
            tries=len(ids_by_key[call.idempotency_key]),
        )
        for call in calls
    ]


@dataclass(frozen=True)
class StepRow:
    step: Step
    model_text: str
    output_preview: str
    error: dict[str, Any] | None
    output_artifact: int | None = None
    # The step ran under another declaration of the agent than the step before it.
    version_changed: bool = False


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
    def status_label(self) -> str:
        """The status as people name it: an aborted task a person cancelled is "Cancelled"
        (its `agentops.task.aborted` event says so; the stored status stays `aborted`)."""
        ended = next((r.event for r in self.events if r.event.action == ABORTED_EVENT), None)
        return status_label(
            self.task, cancelled=ended is not None and bool((ended.payload or {}).get("cancelled"))
        )

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


def versions_marked(rows: list[StepRow]) -> list[StepRow]:
    """Mark each step that ran under another version of the agent's declaration than the last
    step before it that ran (steps that never started record none)."""
    marked, previous = [], ""
    for row in rows:
        version = row.step.agent_version
        if version and previous and version != previous:
            row = replace(row, version_changed=True)
        previous = version or previous
        marked.append(row)
    return marked


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
        steps=versions_marked([step_row(s) for s in steps]),
        tool_calls=task.call_list,
        events=[_event_row(e) for e in task.event_list],
        # Seqs are gapless from 1, so the last one is the count.
        events_total=task.last_seq,
        attempts=sum(s.attempts_total for s in steps),  # type: ignore[attr-defined]
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


# What the task list and the task page show of a task, as far as a poll must notice: every
# commit and transition moves `last_seq` and `updated_at`, so steps, events and progress come
# with them; the rest are the columns the pages print.
_LIST_STATE = ("id", "status", "phase", "current_step", "step_count", "last_seq", "updated_at")
_PAGE_STATE = (
    *_LIST_STATE,
    *("mode", "claims", "recoveries", "recovery_cap", "step_retry_cap", "tokens_used"),
    *("tokens_saved", "token_budget", "cost_used", "cost_budget", "wall_time_budget_seconds"),
    *("next_run_at", "failure", "parent_id"),
)


def task_list_version_read(*, status: str | None, viewer: User, page: Any, size: int) -> str:
    """The version (agentops.plumbing.web.poll_version) of a page of the task list: a digest of each
    row it shows (the list's columns and its compensated calls), whether a next page exists, the
    viewer, the filter and the page, in one statement of cached text (the page's rows through
    the same index as `task_list_recent`, one digest each). The list reads it before its rows,
    so a change committed in between shows and changes the next poll's version."""
    every = may_read_every_task(viewer)

    def digests(offset: int, limit: int) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                _task_list_state_sql(every=every, status=_status_kind(status)),
                [*([] if every else [viewer.pk]), *_status_params(status), limit, offset],
            )
            return [row[0] for row in cursor.fetchall()]

    found = window(digests, page=page, size=size)
    return poll_version(
        "task_list", viewer.pk, status or "", found.number, found.has_next, found.object_list
    )


def task_detail_version_read(*, task_id: int, viewer: User) -> str | None:
    """The version (agentops.plumbing.web.poll_version) of the live part of a task page, in one
    short statement of cached text whatever the number of tasks or steps: a digest of the task's
    state, its ledger rows (count and newest change) and its family's states (its parent and
    children). None when `viewer` may not see the task (the page answers 404 then). The page
    reads it before the detail, so a change committed in between shows on the page and changes
    the next poll's version."""
    every = may_read_every_task(viewer)
    with connection.cursor() as cursor:
        cursor.execute(
            _task_page_state_sql(every=every), [task_id, *([] if every else [viewer.pk])]
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return poll_version("task_detail", viewer.pk, row[0])


def _columns(alias: str, names: Sequence[str]) -> str:
    return ", ".join(f'{alias}."{Task._meta.get_field(name).column}"' for name in names)  # type: ignore[union-attr]


def _status_kind(status: str | None) -> str:
    """How the list's SQL filters on `status` (`_status_filtered`'s cases)."""
    if not status:
        return ""
    return status if status in (CANCELLED, TaskStatus.ABORTED) else "status"


def _status_params(status: str | None) -> list[str]:
    if not status:
        return []
    return [TaskStatus.ABORTED if status == CANCELLED else status]


@cache
def _task_list_state_sql(*, every: bool, status: str) -> str:
    """One digest per row of a page of the task list (`task_list_recent`'s rows and order):
    parameters the viewer's id (unless they read every task), the status (when filtered:
    `status` is `_status_kind`'s), the limit and the offset."""
    task, call, event = Task._meta.db_table, ToolCall._meta.db_table, Event._meta.db_table
    cancelled = (
        f'EXISTS (SELECT 1 FROM "{event}" e WHERE e."task_id" = t."id" '
        f"AND e.\"action\" = '{ABORTED_EVENT}' AND e.\"payload\" -> 'cancelled' = 'true'::jsonb)"
    )
    where = [
        *([] if every else ['t."created_by_id" = %s']),
        *(['t."status" = %s'] if status else []),
        *([cancelled] if status == CANCELLED else []),
        *([f"NOT {cancelled}"] if status == TaskStatus.ABORTED else []),
    ]
    compensated = (
        f'(SELECT count(*) FROM "{call}" k WHERE k."task_id" = t."id" '
        f"AND k.\"status\" = '{LedgerStatus.COMPENSATED}')"
    )
    return (
        f"SELECT md5(CAST(ROW({_columns('t', _LIST_STATE)}, {compensated}) AS text)) "
        f'FROM "{task}" t {"WHERE " + " AND ".join(where) if where else ""} '
        f'ORDER BY t."id" DESC LIMIT %s OFFSET %s'
    )


@cache
def _task_page_state_sql(*, every: bool) -> str:
    """A digest of one task's page state (parameters: the task's id, then the viewer's unless
    they read every task): its columns, its ledger rows' count and newest change, and its
    parent's and children's list states."""
    task, call = Task._meta.db_table, ToolCall._meta.db_table
    calls = f'SELECT ROW(count(*), max(k."updated_at")) FROM "{call}" k WHERE k."task_id" = t."id"'
    family = (
        f'SELECT json_agg(json_build_array({_columns("f", _LIST_STATE)}) ORDER BY f."id") '
        f'FROM "{task}" f WHERE f."parent_id" = t."id" OR f."id" = t."parent_id"'
    )
    owner = "" if every else ' AND t."created_by_id" = %s'
    return (
        f"SELECT md5(CAST(ROW({_columns('t', _PAGE_STATE)}, ({calls}), ({family})) AS text)) "
        f'FROM "{task}" t WHERE t."id" = %s{owner}'
    )


# -- earlier work: the rule-based summary and the model's, side by side --------------------------

MODEL_RESULT = "agentops.step.model_result"


@dataclass(frozen=True)
class EarlierWork:
    """The task's latest model-written summary of its earlier work (`engine.summaries`: its
    record, the step whose prompt it was asked for, 1-based) and the rule-based lines of the
    same steps, as the prompt carried them."""

    before_step: int
    record: dict[str, Any]
    lines: list[str]

    @property
    def written(self) -> bool:
        return self.record.get("status") == "written"


def task_earlier_work_get(*, task: Task, steps: Sequence[Step]) -> EarlierWork | None:
    """The latest model-written summary of `task` with the rule-based lines of the steps it
    covers (`steps`: the task's, in plan order, as the page loaded them), in one query; None
    when the task has none."""
    found = (
        Event.objects.filter(task=task, action=MODEL_RESULT, payload__has_key="summary")
        .order_by("-seq")
        .values_list("step_ordinal", "payload")
        .first()
    )
    if found is None:
        return None
    ordinal, payload = found
    record = payload["summary"] if isinstance(payload.get("summary"), dict) else {}
    before = ordinal if ordinal is not None else len(steps)
    older = [s for s in steps if s.status in STEP_DONE and s.ordinal < before]
    covered = older[: int(record.get("steps") or 0)]
    return EarlierWork(
        before_step=before + 1, record=record, lines=[summary_line(s) for s in covered]
    )
