"""The one place that writes statuses, leases and the event log.

Every status change is a conditional UPDATE whose WHERE clause comes from the transition table in
`agentops.states`, plus its events (named in the same table) in the same transaction. The fields
these functions own (status, lease, event sequence) cannot be passed in by a caller, and the
database refuses a status change the table does not allow (triggers, migration 0008). Writes by
the lease holder are also fenced by its epoch: when another worker has claimed the task (or a
person revoked the lease), the UPDATE changes zero rows and `LeaseLost` stops the holder. Callers
own the transaction.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, models
from django.db.models import F, QuerySet
from django.db.models.functions import Now

from agentops.engine import rows
from agentops.engine.commit import STATUS_FIELD, TASK_OWNED_FIELDS, refuse_owned, status_stamped
from agentops.engine.commit import Commit as Commit
from agentops.engine.commit import EventSpec as EventSpec
from agentops.engine.commit import Lease as Lease
from agentops.engine.dispatch import task_enqueue
from agentops.engine.statements import artifact_id_reserved as artifact_id_reserved
from agentops.engine.statements import db_time_after as db_time_after
from agentops.engine.statements import json_text_of, one_of, prepared_cursor
from agentops.engine.statements import lease_deadline as lease_deadline
from agentops.engine.statements import prepared_rows as prepared_rows
from agentops.models import Event, FleetStop, Step, StopScope, Task, ToolCall
from agentops.plumbing import prometheus
from agentops.states import STEP_TRANSITIONS, TASK_TRANSITIONS, TERMINAL, TaskStatus, ledger_sources

logger = logging.getLogger(__name__)


def _append_events(
    task_id: int, last_seq: int, events: list[EventSpec], *, actor: User | None = None
) -> None:
    first = last_seq - len(events) + 1
    rows = []
    for offset, spec in enumerate(events):
        rows.append(
            Event(
                task_id=task_id,
                seq=first + offset,
                action=spec.action,
                step_ordinal=spec.step,
                payload=spec.stored_payload(),
                actor=actor if getattr(actor, "pk", None) else None,
                actor_label=getattr(actor, "username", "") or "",
            )
        )
    Event.objects.bulk_create(rows)
    prometheus.events_written((row.action, row.payload) for row in rows)


def _update_and_log(
    queryset: models.QuerySet[Task],
    task_id: int,
    events: list[EventSpec],
    fields: dict[str, Any],
    *,
    actor: User | None = None,
) -> int | None:
    """Apply `fields` to the task if `queryset` still matches it; append events.

    Returns the new last_seq, or None when the queryset matched nothing."""
    updated = queryset.update(
        last_seq=F("last_seq") + len(events), updated_at=Now(), **status_stamped(fields)
    )
    if not updated:
        return None
    last_seq = Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()
    if events:
        _append_events(task_id, last_seq, events, actor=actor)
    return last_seq


def task_claim(*, task_id: int, owner: str) -> Lease | None:
    """Claim the task if it is claimable and its lease is free (see `task_claim_row`)."""
    claimed = task_claim_row(task_id=task_id, owner=owner)
    return None if claimed is None else claimed[0]


def task_claim_row(*, task_id: int, owner: str) -> tuple[Lease, Task] | None:
    """Claim the task if it is claimable and its lease is free: the `start` transition. Returns
    the lease and the task's row as the claim left it.

    One statement locks the row with SKIP LOCKED, bumps the epoch, sets the lease from the
    database clock, counts a recovery when the previous holder died while `running` (so a crash
    loop counts toward the cap), and appends the claim event. Returns None when another worker
    holds the task, it is parked or terminal, not yet due, or a stop in force holds it. A claim
    never waits behind a holder frozen inside a transaction (the server cuts that holder off;
    the sweeper re-drives the task after it).
    """
    start = TASK_TRANSITIONS["start"]
    event = EventSpec(start.event, payload={"owner": owner}, fold={"status": start.target})
    params = [
        task_id,
        start.target,
        owner,
        timedelta(seconds=settings.AGENTOPS["LEASE_SECONDS"]),
        TaskStatus.RUNNING,
        start.event,
        json_text_of(event.stored_payload()),
        TaskStatus.RUNNING,
    ]
    granted_at = time.monotonic()
    with prepared_cursor() as cursor:
        cursor.execute(_claim_statement(), params)
        row = cursor.fetchone()
    if row is None:
        return None
    task = rows.instance(Task, row)
    payload = {**event.payload, "recovered": row[-1] == TaskStatus.RUNNING}
    prometheus.events_written([(start.event, payload)])
    lease = Lease(
        task_id=task_id,
        epoch=task.lease_epoch,
        owner=owner,
        last_seq=task.last_seq,
        renewed_at=granted_at,
        child=task.parent_id is not None,
    )
    return lease, task


# Claimable: in a source status of `start`, the lease free or run out, due, and not held by a
# stop in force of every task or of the task's agent (`engine.stops`).
_CLAIMABLE = (
    '{t}."status" {sources} AND ({t}."lease_expires_at" IS NULL OR '
    '{t}."lease_expires_at" < clock_timestamp()) AND ({t}."next_run_at" IS NULL OR '
    '{t}."next_run_at" <= clock_timestamp()) AND {unheld}'
)


def _unheld(t: str) -> str:
    """No stop in force holds task `t` (the task table, quoted): a tiny table, read through its
    partial unique index of the stops in force."""
    return (
        f'NOT EXISTS (SELECT 1 FROM "{FleetStop._meta.db_table}" s WHERE s."lifted_at" IS NULL '
        f'AND (s."scope" = \'{StopScope.ALL.value}\' OR (s."scope" = '
        f'\'{StopScope.AGENT.value}\' AND s."target" = {t}."agent")))'
    )


@functools.cache
def _claim_statement() -> str:
    """The claim as one data-modifying `WITH`; its parameters are built by `task_claim_row`.

    The row is locked first (SKIP LOCKED), and the UPDATE checks the claimable conditions
    again on the row it locked. It returns the task's columns, then the status before the claim.
    """
    task = Task._meta.db_table
    t = f'"{task}"'
    claimable = _CLAIMABLE.format(
        t=t, sources=one_of(TASK_TRANSITIONS["start"].sources), unheld=_unheld(t)
    )
    return (
        f'WITH claimable AS (SELECT "id", "status" FROM {t} WHERE "id" = %s AND '
        f"{claimable} FOR UPDATE SKIP LOCKED), "
        f'claimed AS (UPDATE {t} SET "status" = CAST(%s AS varchar), '
        f'"lease_epoch" = {t}."lease_epoch" + 1, "lease_owner" = CAST(%s AS varchar), '
        '"lease_expires_at" = clock_timestamp() + CAST(%s AS interval), "next_run_at" = NULL, '
        f'"failure" = NULL, "claims" = {t}."claims" + 1, "recoveries" = {t}."recoveries" + '
        f'CASE WHEN {t}."status" = CAST(%s AS varchar) THEN 1 ELSE 0 END, '
        f'"started_at" = COALESCE({t}."started_at", STATEMENT_TIMESTAMP()), '
        f'"last_seq" = {t}."last_seq" + 1, "updated_at" = STATEMENT_TIMESTAMP(), '
        '"status_changed_at" = STATEMENT_TIMESTAMP() '
        f'FROM claimable WHERE {t}."id" = claimable."id" AND {claimable} '
        f'RETURNING {rows.columns(Task)}, claimable."status" AS "previous"), '
        f'event AS (INSERT INTO "{Event._meta.db_table}" ("task_id", "seq", "action", '
        '"step_ordinal", "payload", "actor_label", "created_at") SELECT "id", "last_seq", '
        "CAST(%s AS varchar), NULL, CAST(%s AS jsonb) || jsonb_build_object('recovered', "
        "\"previous\" = CAST(%s AS varchar)), '', STATEMENT_TIMESTAMP() FROM claimed) "
        f'SELECT {rows.columns(Task, "claimed")}, "previous" FROM claimed'
    )


def fenced_write(
    lease: Lease,
    events: list[EventSpec],
    *,
    transition: str | None = None,
    **fields: Any,
) -> int:
    """Write as the lease holder: renew the lease, apply `fields`, append `events`, in one
    statement (`fenced_commit` with nothing else in it).

    With `transition`, also move the status along that (fenced) transition. Runs in the caller's
    transaction if there is one. Raises LeaseLost when the epoch moved on or the task left
    `running`, and TypeError for a field this module owns (status, lease, sequence).
    """
    with fenced_commit(lease, events, transition=transition, **fields) as commit:
        pass
    return commit.seq


def fenced_commit(
    lease: Lease,
    events: list[EventSpec],
    *,
    transition: str | None = None,
    **fields: Any,
) -> Commit:
    """A fenced commit to fill in a `with` block: the task's fields and events, plus what the
    block adds (step and ledger transitions, a new ledger row, a snapshot). It is sent as one
    statement when the block ends. See `Commit`."""
    refuse_owned("fenced_write", fields, TASK_OWNED_FIELDS)
    sources: set[str] = {TaskStatus.RUNNING}
    last: list[EventSpec] = []
    if transition is not None:
        spec = TASK_TRANSITIONS[transition]
        assert spec.fenced, f"{transition} is not a lease-holder transition"
        sources = set(spec.sources)
        fields["status"] = spec.target
        last.append(EventSpec(spec.event, fold={"status": spec.target}))
        if spec.target != TaskStatus.RUNNING:
            fields["lease_expires_at"] = None
            fields["lease_owner"] = ""
            if spec.target in TERMINAL:
                fields.setdefault("finished_at", Now())
    if "lease_expires_at" not in fields and lease.renewal_due():
        # Renewed only when less than half is left: most commits leave the deadline alone.
        fields["lease_expires_at"] = lease_deadline()
    return Commit(lease, list(events), frozenset(sources), fields, last=last, ended=_terminal_hook)


def task_transition(
    *,
    task_id: int,
    name: str,
    actor: User | None = None,
    payload: dict[str, Any] | None = None,
    **fields: Any,
) -> bool:
    """Move a task along an unfenced transition (a person, the sweeper). Revokes any lease.

    Returns False, changing nothing, when the task is not in one of the transition's sources
    (a concurrent transition won). Must run inside the caller's transaction. Raises TypeError
    for a field this function owns (status, lease, sequence).
    """
    refuse_owned("task_transition", fields, TASK_OWNED_FIELDS)
    spec = TASK_TRANSITIONS[name]
    assert not spec.fenced, f"{name} is a lease-holder transition"
    fields = {
        **fields,
        "status": spec.target,
        "lease_epoch": F("lease_epoch") + 1,
        "lease_owner": "",
        "lease_expires_at": None,
    }
    if spec.target in TERMINAL:
        fields.setdefault("finished_at", Now())
    queryset = Task.objects.filter(pk=task_id, status__in=spec.sources)
    event = EventSpec(spec.event, payload=payload or {}, fold={"status": spec.target})
    moved = _update_and_log(queryset, task_id, [event], fields, actor=actor) is not None
    if moved and spec.target in TERMINAL:
        _terminal_hook(task_id)
    return moved


def _terminal_hook(task_id: int) -> None:
    """In the transaction that ends a task: a child wakes its parent when it is the last."""
    parent_wake_if_done(child_id=task_id)


# -- a fan-out parent's wake (`engine.children` parks it; a task's end wakes it, here) ----------


def children_unfinished(parent_id: int) -> QuerySet[Task]:
    return Task.objects.filter(parent_id=parent_id).exclude(status__in=TERMINAL)


def parent_wake(parent_id: int, *, because: int | None) -> bool:
    """The `wake` transition and its job; caller holds the transaction (and the parent lock)."""
    moved = task_transition(
        task_id=parent_id,
        name="wake",
        payload={"child": because} if because is not None else {},
    )
    if moved:
        seq = Task.objects.filter(pk=parent_id).values_list("last_seq", flat=True).get()
        task_enqueue(parent_id, token=seq)
    return moved


def parent_wake_if_done(*, child_id: int) -> bool:
    """Called inside a child's terminal transaction: lock the parent and wake it when no
    sibling is left unfinished. Returns True when this call woke it."""
    parent_id = Task.objects.filter(pk=child_id).values_list("parent_id", flat=True).first()
    if parent_id is None:
        return False
    # Lock the parent whatever its status: a parent about to park waits for this transaction
    # and then sees this child terminal.
    status = (
        Task.objects.select_for_update()
        .filter(pk=parent_id)
        .values_list("status", flat=True)
        .first()
    )
    if status != TaskStatus.AWAITING_CHILDREN or children_unfinished(parent_id).exists():
        return False
    return parent_wake(parent_id, because=child_id)


def task_append_event(
    *, task_id: int, event: EventSpec, actor: User | None = None, **fields: Any
) -> int:
    """Append an event that changes no status (a person's note on the task, or what an
    intervention changed after its transition), with the task `fields` it records (never a
    status, lease or sequence field: TypeError). Caller holds the transaction and, with
    `fields`, the task's row lock."""
    refuse_owned("task_append_event", fields, TASK_OWNED_FIELDS)
    seq = _update_and_log(Task.objects.filter(pk=task_id), task_id, [event], fields, actor=actor)
    assert seq is not None
    return seq


def step_transition(*, step: Step, name: str, **fields: Any) -> bool:
    """Move a step along `name` if its row is in one of the sources; mirror the change on `step`.

    The caller has fenced the task in the same transaction. Raises TypeError for `status`.
    """
    refuse_owned("step_transition", fields, STATUS_FIELD)
    spec = STEP_TRANSITIONS[name]
    updated = Step.objects.filter(pk=step.pk, status__in=spec.sources).update(
        status=spec.target, **fields
    )
    if updated:
        step.status = spec.target
        for attr, value in fields.items():
            if not hasattr(value, "resolve_expression"):
                setattr(step, attr, value)
    return bool(updated)


def step_record(*, step: Step, **fields: Any) -> None:
    """Write fields of a step that change no status (its routing, a recorded model response),
    in the caller's fenced transaction. Raises TypeError for `status`."""
    refuse_owned("step_record", fields, STATUS_FIELD)
    Step.objects.filter(pk=step.pk).update(**fields)


def ledger_transition(*, call_id: int, target: str, **fields: Any) -> bool:
    """Move a ledger row to `target` if that is a legal transition from its current status.
    Raises TypeError for `status`."""
    refuse_owned("ledger_transition", fields, STATUS_FIELD)
    updated = ToolCall.objects.filter(pk=call_id, status__in=ledger_sources(target)).update(
        status=target, updated_at=Now(), **fields
    )
    return bool(updated)


def rows_restore(
    *,
    task_id: int,
    current_step: int | None,
    steps: dict[int, str],
    calls: dict[int, str],
    event: EventSpec,
    actor: User | None,
) -> int:
    """Write the statuses a restore from the log decided (`engine/restore.py`): step statuses by
    ordinal, ledger statuses by row id, the progress pointer, and `event`. Caller holds the
    transaction and the task's row lock, and has checked that the task is stopped.

    These are not moves along the tables but the rows put back to what the log recorded, so
    the database's transition triggers accept any pair for this task's rows while the
    transaction says it is restoring it (`agentops.restoring`, migration 0019), and only then."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('agentops.restoring', %s, true)", [str(task_id)])
        for ordinal, status in steps.items():
            Step.objects.filter(task_id=task_id, ordinal=ordinal).update(status=status)
        for call_id, status in calls.items():
            ToolCall.objects.filter(task_id=task_id, pk=call_id).update(
                status=status, updated_at=Now()
            )
        cursor.execute("SELECT set_config('agentops.restoring', '', true)")
    fields = {} if current_step is None else {"current_step": current_step}
    return task_append_event(task_id=task_id, event=event, actor=actor, **fields)


# -- rows as a commit will leave them: the runner builds on them before it sends ------------


M = TypeVar("M", bound=models.Model)


def _copied(instance: M) -> M:
    """`copy.copy(instance)`: the same values and a copy of `_state` (with its cache of related
    rows), as `Model.__getstate__` makes them, without the unpickling Django's `__reduce__`
    sends a copy through, nor `__getstate__`'s pass over every value for pickling."""
    new = instance.__class__.__new__(instance.__class__)
    new.__dict__.update(instance.__dict__)
    state = copy.copy(instance._state)
    state.fields_cache = instance._state.fields_cache.copy()
    new._state = state
    return new


def step_as_done(step: Step, *, output: Any) -> Step:
    """A copy of `step` as it will read once its `succeed` commits: the runner builds the next
    step's prompt from it before the one write that completes this step and starts the next."""
    done = _copied(step)
    done.status = STEP_TRANSITIONS["succeed"].target
    done.output = output
    return done


def step_as_started(step: Step) -> Step:
    """A copy of `step` as it will read once its `start` commits."""
    started = _copied(step)
    started.status = STEP_TRANSITIONS["start"].target
    return started


def call_as(call: ToolCall, target: str) -> ToolCall:
    """A copy of a ledger row as it will read once its move to `target` commits."""
    moved = _copied(call)
    moved.status = target
    return moved


def task_as(task: Task, *, status: str, current_step: int) -> Task:
    """A copy of the task as it will read once a commit that sets these fields commits."""
    moved = _copied(task)
    moved.status, moved.current_step = status, current_step
    return moved
