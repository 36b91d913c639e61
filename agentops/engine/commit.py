"""The one-statement commit of the lease holder (`Commit`), and the lease and events it carries.

`transitions.fenced_commit` makes one; the block filling it adds step and ledger transitions, a new
ledger row, a snapshot and artifact rows, and the commit sends them as one statement (its SQL is
built by `engine.statements`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection, models, transaction
from django.db.models.functions import Now

from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import CheckpointMismatch, LeaseLost
from agentops.engine.jsonvalues import Encoded, offloaded
from agentops.engine.statements import (
    DbTimeAfter,
    JsonTexts,
    artifact_id_reserved,
    artifact_insert,
    assignments,
    db_value,
    insert_shape,
    one_of,
    prepared_cursor,
)
from agentops.engine.syncs import Syncs
from agentops.models import AuditItem, Event, Snapshot, Step, Task, ToolCall
from agentops.plumbing import prometheus
from agentops.states import STEP_TRANSITIONS, TERMINAL, ledger_sources


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


# Task fields only the transition code (`transitions` and this commit) writes: the status (by a
# transition), the lease, the event sequence.
TASK_OWNED_FIELDS = frozenset(
    {"status", "status_changed_at", "lease_epoch", "lease_owner", "lease_expires_at", "last_seq"}
)
# Step and ledger rows: the status, moved only by a transition.
STATUS_FIELD = frozenset({"status"})


def refuse_owned(function: str, fields: dict[str, Any], owned: frozenset[str]) -> None:
    """A caller's fields never include what the transition code owns."""
    if passed := sorted(owned.intersection(fields)):
        raise TypeError(
            f"{function}() does not take {', '.join(passed)}: a status moves only by a "
            "transition, and the lease and event sequence are the transition code's"
        )


def status_stamped(fields: dict[str, Any]) -> dict[str, Any]:
    """Task fields plus the time of the status change, when they set a status."""
    if "status" not in fields:
        return fields
    return {**fields, "status_changed_at": Now()}


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
    writes that must commit with it (a gate, a parent's wake-up); an audit item naming a new
    ledger row is a part of the statement (`audit_insert`). Sent as a
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
        ended: Callable[[int], None],
    ) -> None:
        self.lease = lease
        # Called in the transaction of a commit that ends the task (a child wakes its parent).
        self.ended = ended
        # The block may add events and fields; the transition's event stays last.
        self.events = events
        self.fields = fields
        self.sources = sources
        self._last = last
        self.parts: list[_Part] = []
        # The artifact files this commit points to and their directories: durable before the
        # statement is sent (each file's fsync runs while the commit is built).
        self.syncs = Syncs()
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
        refuse_owned("Commit.step_update", fields, STATUS_FIELD)
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
        """A new ledger row, inserted with the commit; its pk is set once it is. It starts
        `pending`; only a read-only call is recorded `succeeded`, once it ran (the database
        refuses any other row that starts past pending)."""
        return self.call_insert(ToolCall(**fields))

    def call_insert(self, call: ToolCall) -> ToolCall:
        """`call_create` of a row already made (not saved): its fields as they are now."""
        sql, inserted = insert_shape(ToolCall)
        name = f"c{len(self.parts)}"
        self.parts.append(
            _Part(
                name,
                sql,
                [db_value(f, getattr(call, f.attname), self.json) for f in inserted],
                target=call,
                returns_id=True,
            )
        )
        return call

    def audit_insert(self, item: AuditItem, call: ToolCall) -> None:
        """Insert `item` (not saved), the audit item of `call`, a ledger row this commit inserts
        (`call_insert`): the same statement inserts both, the item naming the row's new id."""
        source = next(part for part in self.parts if part.returns_id and part.target is call)
        sql, inserted = insert_shape(AuditItem, ("tool_call", source.name))
        self.parts.append(
            _Part(
                f"i{len(self.parts)}",
                sql,
                [db_value(f, getattr(item, f.attname), self.json) for f in inserted],
                target=item,
                returns_id=True,
            )
        )

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
        sets = assignments(model, fields, params, self.json)
        params.append(pk)
        where = f'"{table}"."id" = %s'
        if sources is not None:
            where += f' AND "{table}"."status" {one_of(sources)}'
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
        self,
        value: Any,
        *,
        path: str,
        task_id: int | None,
        known: Encoded | None = None,
        checked: bool = False,
    ) -> Any:
        """`jsonvalues.offloaded`, with the artifact's row inserted by this commit's statement
        (its file and directory are durable before the statement is sent: `syncs`)."""

        def create(name: str, size: int, sha256: str) -> int:
            return self._artifact_create(task_id, name, size, sha256)

        return offloaded(
            value,
            path=path,
            task_id=task_id,
            create=create,
            syncs=self.syncs,
            known=known,
            inline=self.json.remember,
            checked=checked,
        )

    def _artifact_create(self, task_id: int | None, name: str, size: int, sha256: str) -> int:
        """A new artifact row, joined to the fence. Its id is reserved from the table's
        sequence first, so the pointer naming it is a parameter of the same statement."""
        assert not self.done, "the statement was sent already"
        artifact_id = artifact_id_reserved()
        self.parts.append(
            _Part(
                f"a{len(self.parts)}",
                artifact_insert(),
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
        self.syncs.wait()
        sql, params = self._statement()
        sent_at, timer = time.monotonic(), time.perf_counter()
        try:
            with prepared_cursor() as cursor:
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
            self.ended(self.lease.task_id)
        return self.seq

    def _statement(self) -> tuple[str, list[Any]]:
        table = Task._meta.db_table
        params: list[Any] = [self.seq]
        sets = assignments(Task, status_stamped(self.fields), params, self.json)
        params += [self.lease.task_id, self.lease.epoch, self.lease.last_seq]
        ctes = [
            f'fence AS (UPDATE "{table}" SET "last_seq" = %s, "updated_at" = '
            f'STATEMENT_TIMESTAMP(){", " if sets else ""}{sets} WHERE "{table}"."id" = %s AND '
            f'"lease_epoch" = %s AND "last_seq" = %s AND "status" {one_of(self.sources)} '
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
