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

import functools
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, cast

import psycopg
from django.conf import settings
from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, models, transaction
from django.db.models import F, QuerySet, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.db.models.sql import UpdateQuery

from agentops import prometheus
from agentops.engine import rows
from agentops.engine.crashpoints import crashpoint
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import CheckpointMismatch, LeaseLost
from agentops.engine.jsonvalues import Encoded, fsync_directory, offloaded
from agentops.models import Artifact, Event, Snapshot, Step, Task, ToolCall
from agentops.states import (
    STEP_TRANSITIONS,
    TASK_TRANSITIONS,
    TERMINAL,
    TaskStatus,
    ledger_sources,
)

logger = logging.getLogger(__name__)


@dataclass
class Lease:
    """The right of one worker to advance one task, until another claim bumps the epoch.

    `last_seq` is the holder's view of the event log. While the epoch is current nobody else
    appends events (every outside transition bumps the epoch), so each fenced write can number its
    events without reading the task back; the write also requires `last_seq` to be unchanged.
    """

    task_id: int
    epoch: int
    owner: str
    last_seq: int
    # The worker's monotonic clock just before the lease was last granted or renewed by a
    # commit (the database set the deadline after that, so what is left is at least this).
    renewed_at: float = field(default_factory=time.monotonic)
    # Whether the task is a child (its end may wake its parent); None when the holder does not
    # know, and the terminal commit looks it up. A task's parent never changes.
    child: bool | None = None

    def renewal_due(self) -> bool:
        """Less than half of the lease is left: the next commit renews it."""
        half = float(settings.AGENTOPS["LEASE_SECONDS"]) / 2
        return time.monotonic() - self.renewed_at > half


@dataclass(frozen=True)
class EventSpec:
    """An event to append. `fold` carries the state changes resume replays onto a snapshot."""

    action: str
    step: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    fold: dict[str, Any] | None = None

    def stored_payload(self) -> dict[str, Any]:
        """The payload as the event row stores it: with the fold, when there is one."""
        return {**self.payload, "fold": self.fold} if self.fold else dict(self.payload)


class ClockTimestamp(models.Func):
    """PostgreSQL's `clock_timestamp()`: the time the row is actually written.

    `now()` is the transaction's start: a claim that waited on a lock would be granted a lease
    that had already run out while it waited.
    """

    template = "clock_timestamp()"
    output_field = models.DateTimeField()


class DbTimeAfter(models.ExpressionWrapper):  # type: ignore[type-arg]
    """The database clock plus `seconds` (the one-statement commit writes it without the ORM)."""

    def __init__(self, seconds: float) -> None:
        self.delta = timedelta(seconds=seconds)
        super().__init__(ClockTimestamp() + Value(self.delta), output_field=models.DateTimeField())


def db_time_after(seconds: float) -> Any:
    """The database clock plus `seconds`, as an expression: leases and due times never depend
    on a worker's clock."""
    return DbTimeAfter(seconds)


def lease_deadline() -> Any:
    return db_time_after(settings.AGENTOPS["LEASE_SECONDS"])


# Task fields only this module writes: the status (by a transition), the lease, the event sequence.
TASK_OWNED_FIELDS = frozenset(
    {"status", "status_changed_at", "lease_epoch", "lease_owner", "lease_expires_at", "last_seq"}
)
# Step and ledger rows: the status, moved only by a transition.
STATUS_FIELD = frozenset({"status"})


def _refuse_owned(function: str, fields: dict[str, Any], owned: frozenset[str]) -> None:
    """A caller's fields never include what the transition code owns."""
    if passed := sorted(owned.intersection(fields)):
        raise TypeError(
            f"{function}() does not take {', '.join(passed)}: a status moves only by a "
            "transition, and the lease and event sequence are the transition code's"
        )


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
        last_seq=F("last_seq") + len(events), updated_at=Now(), **_status_stamped(fields)
    )
    if not updated:
        return None
    last_seq = Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()
    if events:
        _append_events(task_id, last_seq, events, actor=actor)
    return last_seq


def _status_stamped(fields: dict[str, Any]) -> dict[str, Any]:
    """Task fields plus the time of the status change, when they set a status."""
    if "status" not in fields:
        return fields
    return {**fields, "status_changed_at": Now()}


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
    holds the task, it is parked or terminal, or not yet due. A claim never waits behind a holder
    frozen inside a transaction (the server cuts that holder off; the sweeper re-drives the task
    after it).
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
        _json_text(event.stored_payload()),
        TaskStatus.RUNNING,
    ]
    granted_at = time.monotonic()
    with _prepared_cursor() as cursor:
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


# Claimable: in a source status of `start`, the lease free or run out, and due.
_CLAIMABLE = (
    '{t}."status" {sources} AND ({t}."lease_expires_at" IS NULL OR '
    '{t}."lease_expires_at" < clock_timestamp()) AND ({t}."next_run_at" IS NULL OR '
    '{t}."next_run_at" <= clock_timestamp())'
)


@functools.cache
def _claim_statement() -> str:
    """The claim as one data-modifying `WITH`; its parameters are built by `task_claim_row`.

    The row is locked first (SKIP LOCKED), and the UPDATE checks the claimable conditions
    again on the row it locked. It returns the task's columns, then the status before the claim.
    """
    task = Task._meta.db_table
    t = f'"{task}"'
    claimable = _CLAIMABLE.format(t=t, sources=_one_of(TASK_TRANSITIONS["start"].sources))
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
    _refuse_owned("fenced_write", fields, TASK_OWNED_FIELDS)
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
    return Commit(lease, list(events), frozenset(sources), fields, last=last)


# Installed by migration 0011: raises inside the statement, so a refused part undoes it all.
REFUSE_FUNCTION = "agentops_commit_refused"
REFUSED_SQLSTATE = "AOC01"


@dataclass
class _Part:
    name: str
    sql: str
    params: list[Any]
    # Must change exactly one row, or the whole commit is refused with this message.
    required: str | None = None
    # Mirror `fields` onto `target` (a model instance) once the commit succeeds.
    target: Any = None
    fields: dict[str, Any] = field(default_factory=dict)
    returns_id: bool = False


class Commit:
    """One fenced commit of the lease holder, sent to PostgreSQL as one statement.

    The statement is a data-modifying `WITH`: the fence (a conditional UPDATE of the task row on
    its id, lease epoch, last_seq and the transition's sources, RETURNING the row) comes first,
    and every other write in it (events, step and ledger transitions, a new ledger row, a
    snapshot, the artifact rows its pointers name) joins the fence, so when the fence matches
    nothing, nothing is written and LeaseLost is raised. A step transition marked `required`
    that matches no row makes the server raise, which rolls the whole statement back
    (CheckpointMismatch). Outside a transaction the statement is its own transaction: one round
    trip, no BEGIN or COMMIT of its own. The caller opens one (`in_transaction`) only for ORM
    writes that must commit with it (an audit item, a gate, a parent's wake-up). Sent as a
    prepared statement with server-side parameters.
    """

    def __init__(
        self,
        lease: Lease,
        events: list[EventSpec],
        sources: frozenset[str],
        fields: dict[str, Any],
        *,
        last: list[EventSpec],
    ) -> None:
        self.lease = lease
        # The block may add events and fields; the transition's event stays last.
        self.events = events
        self.fields = fields
        self.sources = sources
        self._last = last
        self.parts: list[_Part] = []
        # Directories of the artifact files this commit points to: fsynced once each, before
        # the statement is sent.
        self.sync_dirs: set[str] = set()
        self.done = False
        self._atomic: Any = None
        self.json = JsonTexts()
        self._base_seq = lease.last_seq

    @property
    def all_events(self) -> list[EventSpec]:
        return [*self.events, *self._last]

    @property
    def seq(self) -> int:
        """The last event's seq once committed: the task's new last_seq."""
        return self._base_seq + len(self.events) + len(self._last)

    # -- building ----------------------------------------------------------------------------

    def step(self, step: Step, name: str, *, required: bool = False, **fields: Any) -> None:
        """Move `step` along the step transition `name` if its row is in one of the sources
        (required: or refuse the commit); the change is mirrored on `step` once committed."""
        spec = STEP_TRANSITIONS[name]
        self._update(
            Step,
            step.pk,
            {"status": spec.target, **fields},
            sources=spec.sources,
            required=f"step {step.pk} cannot {name} from its status" if required else None,
            target=step,
        )

    def step_update(self, step: Step, **fields: Any) -> None:
        """Write fields other than the status on `step` (routing, the model response)."""
        _refuse_owned("Commit.step_update", fields, STATUS_FIELD)
        self._update(Step, step.pk, fields, target=step)

    def ledger(self, call: ToolCall, target: str, **fields: Any) -> None:
        """Move a ledger row to `target` if that is a legal transition from its status; the
        change is mirrored on `call` once committed."""
        self._update(
            ToolCall,
            call.pk,
            {"status": target, "updated_at": Now(), **fields},
            sources=ledger_sources(target),
            target=call,
        )

    def call_create(self, **fields: Any) -> ToolCall:
        """A new ledger row (`pending`), inserted with the commit; its pk is set once it is."""
        call = ToolCall(**fields)
        sql, inserted = _insert_shape(ToolCall)
        name = f"c{len(self.parts)}"
        self.parts.append(
            _Part(
                name,
                sql,
                [_db_value(f, getattr(call, f.attname), self.json) for f in inserted],
                target=call,
                returns_id=True,
            )
        )
        return call

    def snapshot(self, state: dict[str, Any]) -> None:
        """A snapshot of the progress state as of this commit's last event."""
        # Nothing is sent yet: a worker killed here commits nothing of this commit.
        crashpoint("during_snapshot")
        self.parts.append(
            _Part(
                f"n{len(self.parts)}",
                f'INSERT INTO "{Snapshot._meta.db_table}" ("task_id", "seq", "state", '
                '"created_at") SELECT fence."id", %s, CAST(%s AS jsonb), STATEMENT_TIMESTAMP() '
                'FROM fence RETURNING "id"',
                [self.seq, self.json(state)],
            )
        )

    def _update(
        self,
        model: type[models.Model],
        pk: int,
        fields: dict[str, Any],
        *,
        sources: frozenset[str] | None = None,
        required: str | None = None,
        target: Any = None,
    ) -> None:
        table = model._meta.db_table
        params: list[Any] = []
        sets = _assignments(model, fields, params, self.json)
        params.append(pk)
        where = f'"{table}"."id" = %s'
        if sources is not None:
            where += f' AND "{table}"."status" {_one_of(sources)}'
        self.parts.append(
            _Part(
                f"u{len(self.parts)}",
                f'UPDATE "{table}" SET {sets} FROM fence WHERE {where} RETURNING "{table}"."id"',
                params,
                required=required,
                target=target,
                fields=fields,
            )
        )

    # -- sending -----------------------------------------------------------------------------

    def offloaded(
        self, value: Any, *, path: str, task_id: int | None, known: Encoded | None = None
    ) -> Any:
        """`jsonvalues.offloaded`, with the artifact's row inserted by this commit's statement
        (its file and directory are fsynced before the statement is sent)."""

        def create(name: str, size: int, sha256: str) -> int:
            return self._artifact_create(task_id, name, size, sha256)

        return offloaded(
            value,
            path=path,
            task_id=task_id,
            create=create,
            sync_dirs=self.sync_dirs,
            known=known,
            inline=self.json.remember,
        )

    def _artifact_create(self, task_id: int | None, name: str, size: int, sha256: str) -> int:
        """A new artifact row, joined to the fence. Its id is reserved from the table's
        sequence first, so the pointer naming it is a parameter of the same statement."""
        assert not self.done, "the statement was sent already"
        artifact_id = artifact_id_reserved()
        self.parts.append(
            _Part(
                f"a{len(self.parts)}",
                _artifact_insert(),
                [artifact_id, task_id, name, size, sha256],
            )
        )
        return artifact_id

    def in_transaction(self) -> None:
        """Send the statement now, in a transaction that stays open until the `with` block
        ends: ORM writes after this call commit (or roll back) with it."""
        if not self.done and self._atomic is None:
            self._atomic = transaction.atomic(savepoint=False)
            self._atomic.__enter__()
        self.execute()

    def execute(self) -> int:
        """Send the statement (once). Returns the new last_seq."""
        if self.done:
            return self.seq
        wakes_parent = self.fields.get("status") in TERMINAL and self.lease.child is not False
        if wakes_parent and self._atomic is None:
            # The parent's wake-up commits with the child's terminal transition.
            self.in_transaction()
            return self.seq
        for directory in sorted(self.sync_dirs):
            fsync_directory(directory)
        sql, params = self._statement()
        sent_at, timer = time.monotonic(), time.perf_counter()
        try:
            with _prepared_cursor() as cursor:
                cursor.execute(sql, params)
                row = cursor.fetchone()
        except DatabaseError as exc:
            cause = exc.__cause__
            if isinstance(cause, psycopg.Error) and cause.sqlstate == REFUSED_SQLSTATE:
                raise CheckpointMismatch(str(cause.diag.message_primary)) from None
            raise
        if not row[0]:
            raise LeaseLost(
                f"task {self.lease.task_id}: lease epoch {self.lease.epoch} is no longer current"
            )
        self.done = True
        self.lease.last_seq = self.seq
        if isinstance(self.fields.get("lease_expires_at"), DbTimeAfter):
            self.lease.renewed_at = sent_at
        for part, value in zip(self.parts, row[1:], strict=True):
            if part.returns_id:
                part.target.pk = value
                part.target._state.adding = False
                part.target._state.db = connection.alias
            elif part.target is not None and value:
                for attr, new in part.fields.items():
                    if not hasattr(new, "resolve_expression"):
                        setattr(part.target, attr, new)
        prometheus.checkpoint_committed(timer, ((e.action, e.payload) for e in self.all_events))
        if wakes_parent:
            _terminal_hook(self.lease.task_id)
        return self.seq

    def _statement(self) -> tuple[str, list[Any]]:
        table = Task._meta.db_table
        params: list[Any] = [self.seq]
        sets = _assignments(Task, _status_stamped(self.fields), params, self.json)
        params += [self.lease.task_id, self.lease.epoch, self.lease.last_seq]
        ctes = [
            f'fence AS (UPDATE "{table}" SET "last_seq" = %s, "updated_at" = '
            f'STATEMENT_TIMESTAMP(){", " if sets else ""}{sets} WHERE "{table}"."id" = %s AND '
            f'"lease_epoch" = %s AND "last_seq" = %s AND "status" {_one_of(self.sources)} '
            'RETURNING "id")'
        ]
        events = self.all_events
        if events:
            first = self.lease.last_seq + 1
            rows = [
                {
                    "seq": first + offset,
                    "action": spec.action,
                    "step_ordinal": spec.step,
                    "payload": spec.stored_payload(),
                }
                for offset, spec in enumerate(events)
            ]
            ctes.append(
                f'events AS (INSERT INTO "{Event._meta.db_table}" ("task_id", "seq", "action", '
                '"step_ordinal", "payload", "actor_label", "created_at") SELECT fence."id", '
                'e."seq", e."action", e."step_ordinal", e."payload", \'\', '
                "STATEMENT_TIMESTAMP() FROM fence, jsonb_to_recordset(CAST(%s AS jsonb)) AS "
                'e("seq" bigint, "action" varchar, "step_ordinal" integer, "payload" jsonb))'
            )
            params.append(self.json(rows))
        columns = ["(SELECT count(*) FROM fence)"]
        for part in self.parts:
            ctes.append(f"{part.name} AS ({part.sql})")
            params += part.params
        for part in self.parts:
            if part.returns_id:
                columns.append(f"(SELECT id FROM {part.name})")
            elif part.required:
                columns.append(
                    f"CASE WHEN (SELECT count(*) FROM fence) = 0 OR (SELECT count(*) FROM "
                    f"{part.name}) = 1 THEN 1 ELSE {REFUSE_FUNCTION}(%s) END"
                )
                params.append(part.required)
            else:
                columns.append(f"(SELECT count(*) FROM {part.name})")
        return f"WITH {', '.join(ctes)} SELECT {', '.join(columns)}", params

    # -- the `with` block --------------------------------------------------------------------

    def __enter__(self) -> Commit:
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        try:
            if kind is None:
                self.execute()
        finally:
            if self._atomic is not None:
                atomic, self._atomic = self._atomic, None
                if kind is None:
                    atomic.__exit__(None, None, None)
                else:
                    atomic.__exit__(kind, error, trace)


class _PreparedCursor(psycopg.Cursor):
    """Server-side parameters, prepared on first use: the hot path's statements are parsed and
    planned once per connection."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        return super().execute(query, params, prepare=True)


@contextmanager
def _prepared_cursor() -> Iterator[Any]:
    # The connection itself, not the `connection` proxy (a thread-local lookup per use).
    db: Any = connections[DEFAULT_DB_ALIAS]
    # As Django's own cursors do: a connection a new request or job may find dead (the worker's
    # `close_old_connections` asks for that check) is tested first, and replaced if it is.
    db.close_if_health_check_failed()
    db.ensure_connection()
    raw = db.connection
    if raw.prepare_threshold is None:
        # Django turns automatic preparing off; explicit `prepare=True` needs a threshold set.
        raw.prepare_threshold = PREPARE_THRESHOLD
    # One psycopg cursor per connection (making one copies the adapters map); Django's wrapper
    # around it is made each time, so query logging and execute wrappers apply.
    cursor = _CURSORS.get(raw)
    if cursor is None or cursor.closed:
        cursor = _CURSORS[raw] = _PreparedCursor(raw)
    with db.wrap_database_errors:
        # Django's own wrapping (debug logging, execute wrappers) around a cursor it did not make.
        yield db._prepare_cursor(cursor)


_CURSORS: weakref.WeakKeyDictionary[Any, _PreparedCursor] = weakref.WeakKeyDictionary()


def prepared_rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of a read sent as a prepared statement: the runner's reads once per claim,
    which the ORM would spend more CPU building than the server spends running."""
    with _prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return cast(list[tuple[Any, ...]], cursor.fetchall())


# Only queries sent with `prepare=True` are prepared: Django's own cursors bind client-side.
PREPARE_THRESHOLD = 1_000_000


def _quote(name: str) -> str:
    return f'"{name}"'


def _assignments(
    model: type[models.Model], fields: dict[str, Any], params: list[Any], json_text: JsonTexts
) -> str:
    """`"col" = ...` for each field, its value as a parameter (typed by the column) or, for
    `Now()`, `F(name) + n` and other expressions, as SQL. The text is made once per shape (the
    fields and the kind of each value); only another expression is compiled each time."""
    shape: list[tuple[str, str | None]] = []
    compiled: dict[str, str] = {}
    for name, value in fields.items():
        kind = _kind(name, value)
        shape.append((name, kind))
        if kind == "after":
            params.append(value.delta)
        elif kind == "increment":
            params.append(value.rhs.value)
        elif kind == "value":
            params.append(_db_value(_column(model, name)[0], value, json_text))
        elif kind is None:
            compiled[name] = _compiled(model, name, value, params)
    if not compiled:
        return _sets_sql(model, tuple(shape))
    return ", ".join(
        compiled[name] if kind is None else _sets_sql(model, ((name, kind),))
        for name, kind in shape
    )


def _kind(name: str, value: Any) -> str | None:
    """How a field's value is written: the statement's clock (`now`), the database clock plus
    an interval (`after`), an increment of the column (`increment`: tokens, cost), a parameter
    (`value`), or None for another expression (compiled by the ORM)."""
    if isinstance(value, Now):
        return "now"
    if isinstance(value, DbTimeAfter):
        return "after"
    if (
        isinstance(value, CombinedExpression)
        and value.connector == "+"
        and isinstance(value.lhs, F)
        and isinstance(value.rhs, Value)
        and value.lhs.name == name
    ):
        return "increment"
    if hasattr(value, "resolve_expression"):
        return None
    return "value"


@functools.cache
def _sets_sql(model: type[models.Model], shape: tuple[tuple[str, str | None], ...]) -> str:
    table = model._meta.db_table
    sets = []
    for name, kind in shape:
        _, column, cast_type = _column(model, name)
        if kind == "now":
            sets.append(f"{column} = STATEMENT_TIMESTAMP()")
        elif kind == "after":
            sets.append(f"{column} = clock_timestamp() + CAST(%s AS interval)")
        elif kind == "increment":
            sets.append(f'{column} = "{table}".{column} + CAST(%s AS {cast_type})')
        else:
            sets.append(f"{column} = CAST(%s AS {cast_type})")
    return ", ".join(sets)


def _compiled(model: type[models.Model], name: str, value: Any, params: list[Any]) -> str:
    """`"col" = <expression>` for an expression the statement has no shape for."""
    _, column, cast_type = _column(model, name)
    query = UpdateQuery(model)
    compiler = query.get_compiler(connection=connection)
    resolved = value.resolve_expression(query, allow_joins=False, for_save=True)
    sql, expression_params = compiler.compile(resolved)
    params.extend(expression_params)
    return f"{column} = CAST({sql} AS {cast_type})"


@functools.cache
def _column(model: type[models.Model], name: str) -> tuple[Any, str, str]:
    """A model field, its quoted column and the type its parameters are cast to."""
    model_field = cast(Any, model._meta.get_field(name))
    return model_field, _quote(model_field.column), model_field.cast_db_type(connection)


def _db_value(model_field: Any, value: Any, json_text: JsonTexts) -> Any:
    """The parameter for `value` in `model_field`'s column, as `get_db_prep_save` gives it,
    except that JSON is sent as its text and a status (a str enum) as a plain str: psycopg
    dumps those without an adapter lookup each (the statement casts every parameter to its
    column's type, so PostgreSQL reads the same value)."""
    if value is None:
        return None
    if _is_json(model_field):
        return json_text(value)
    if isinstance(value, str):
        return str.__str__(value)
    return model_field.get_db_prep_save(value, connection)


@functools.cache
def _is_json(model_field: Any) -> bool:
    return isinstance(model_field, models.JSONField)


class JsonTexts:
    """The JSON texts of one commit's values, by identity: a value stored in two columns (a
    step's output that is also its call's result) is serialized once."""

    def __init__(self) -> None:
        # The values are kept with their texts, so an id is not reused while it is here.
        self._texts: dict[int, tuple[Any, str]] = {}

    def __call__(self, value: Any) -> str:
        known = self._texts.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        text = _json_text(value)
        if isinstance(value, (dict, list)):
            self._texts[id(value)] = (value, text)
        return text

    def remember(self, value: Any, data: bytes) -> None:
        """`value`'s JSON is `data` (made already, to size it): the commit sends that."""
        if isinstance(value, (dict, list)):
            self._texts[id(value)] = (value, data.decode())


def _json_text(value: Any) -> str:
    """A JSON value as the text its jsonb parameter is sent as (what psycopg's `Jsonb` sends:
    `json.dumps`, without the spaces)."""
    return json.dumps(value, separators=(",", ":"))


@functools.cache
def _one_of(statuses: frozenset[str]) -> str:
    """`IN (...)` of the statuses as SQL literals: they come from the transition tables, so the
    statement text stays one per shape (prepared once) and needs no array parameter."""
    if not statuses:
        return "IS NULL AND FALSE"
    if not all(status.isidentifier() for status in statuses):
        raise ValueError(f"not a status: {sorted(statuses)}")
    return f"IN ({', '.join(repr(str.__str__(status)) for status in sorted(statuses))})"


@functools.cache
def _insert_shape(model: type[models.Model]) -> tuple[str, list[Any]]:
    """`INSERT` of a new row joined to the fence (creation times from the statement's clock),
    and the fields whose values are its parameters, in order."""
    columns, values, inserted = [], [], []
    for model_field in model._meta.concrete_fields:
        if model_field.primary_key:
            continue
        _, column, cast_type = _column(model, model_field.name)
        columns.append(column)
        if getattr(model_field, "auto_now_add", False):
            values.append("STATEMENT_TIMESTAMP()")
            continue
        values.append(f"CAST(%s AS {cast_type})")
        inserted.append(model_field)
    sql = (
        f'INSERT INTO "{model._meta.db_table}" ({", ".join(columns)}) '
        f'SELECT {", ".join(values)} FROM fence RETURNING "id"'
    )
    return sql, inserted


@functools.cache
def _artifact_insert() -> str:
    """`INSERT` of an artifact row with a reserved id, joined to the fence."""
    table = Artifact._meta.db_table
    names = ("id", "task", "name", "size", "sha256")
    columns = [_column(Artifact, name) for name in names]
    values = ", ".join(f"CAST(%s AS {cast_type})" for _, _, cast_type in columns)
    content_type = Artifact._meta.get_field("content_type").get_default()
    return (
        f'INSERT INTO "{table}" ({", ".join(column for _, column, _ in columns)}, '
        '"content_type", "created_at") '
        f"SELECT {values}, '{content_type}', STATEMENT_TIMESTAMP() FROM fence RETURNING \"id\""
    )


# Artifact ids are reserved from the table's sequence this many at a time, per process and
# database: one round trip per block instead of one per artifact. An id left unused is a gap in
# the sequence, as a rolled-back INSERT leaves.
ARTIFACT_ID_BLOCK = 128
_ARTIFACT_IDS: dict[str, list[int]] = {}
# The web tier's threads share a process's ids.
_ARTIFACT_IDS_LOCK = threading.Lock()
# A forked child (gunicorn's workers, RQ's work horses) reserves its own.
os.register_at_fork(after_in_child=_ARTIFACT_IDS.clear)


def artifact_id_reserved() -> int:
    """An id from the artifact table's sequence that no other row will take."""
    database = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    with _ARTIFACT_IDS_LOCK:
        free = _ARTIFACT_IDS.setdefault(database, [])
        if not free:
            sql = (
                "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s) "
                "ORDER BY 1 DESC"
            )
            table = Artifact._meta.db_table
            free.extend(row[0] for row in prepared_rows(sql, [table, ARTIFACT_ID_BLOCK]))
        return free.pop()


M = TypeVar("M", bound=models.Model)


def _copied(instance: M) -> M:
    """`copy.copy(instance)`: the same state (`Model.__getstate__`, which copies `_state`),
    without the unpickling Django's `__reduce__` sends a copy through."""
    new = instance.__class__.__new__(instance.__class__)
    new.__dict__.update(instance.__getstate__())
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
    _refuse_owned("task_transition", fields, TASK_OWNED_FIELDS)
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
    _refuse_owned("task_append_event", fields, TASK_OWNED_FIELDS)
    seq = _update_and_log(Task.objects.filter(pk=task_id), task_id, [event], fields, actor=actor)
    assert seq is not None
    return seq


def step_transition(*, step: Step, name: str, **fields: Any) -> bool:
    """Move a step along `name` if its row is in one of the sources; mirror the change on `step`.

    The caller has fenced the task in the same transaction. Raises TypeError for `status`.
    """
    _refuse_owned("step_transition", fields, STATUS_FIELD)
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
    _refuse_owned("step_record", fields, STATUS_FIELD)
    Step.objects.filter(pk=step.pk).update(**fields)


def ledger_transition(*, call_id: int, target: str, **fields: Any) -> bool:
    """Move a ledger row to `target` if that is a legal transition from its current status.
    Raises TypeError for `status`."""
    _refuse_owned("ledger_transition", fields, STATUS_FIELD)
    updated = ToolCall.objects.filter(pk=call_id, status__in=ledger_sources(target)).update(
        status=target, updated_at=Now(), **fields
    )
    return bool(updated)
