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
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Now

from agentops import prometheus
from agentops.engine.errors import LeaseLost
from agentops.models import Event, Step, Task, ToolCall
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


@dataclass(frozen=True)
class EventSpec:
    """An event to append. `fold` carries the state changes resume replays onto a snapshot."""

    action: str
    step: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    fold: dict[str, Any] | None = None


class ClockTimestamp(models.Func):
    """PostgreSQL's `clock_timestamp()`: the time the row is actually written.

    `now()` is the transaction's start: a claim that waited on a lock would be granted a lease
    that had already run out while it waited.
    """

    template = "clock_timestamp()"
    output_field = models.DateTimeField()


def db_time_after(seconds: float) -> Any:
    """The database clock plus `seconds`, as an expression: leases and due times never depend
    on a worker's clock."""
    return models.ExpressionWrapper(
        ClockTimestamp() + Value(timedelta(seconds=seconds)), output_field=models.DateTimeField()
    )


def lease_deadline() -> Any:
    return db_time_after(settings.AGENTOPS["LEASE_SECONDS"])


# Task fields only this module writes: the status (by a transition), the lease, the event sequence.
TASK_OWNED_FIELDS = frozenset(
    {"status", "lease_epoch", "lease_owner", "lease_expires_at", "last_seq"}
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
    task_id: int, last_seq: int, events: list[EventSpec], *, actor: Any = None
) -> None:
    first = last_seq - len(events) + 1
    rows = []
    for offset, spec in enumerate(events):
        payload = dict(spec.payload)
        if spec.fold:
            payload["fold"] = spec.fold
        rows.append(
            Event(
                task_id=task_id,
                seq=first + offset,
                action=spec.action,
                step_ordinal=spec.step,
                payload=payload,
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
    actor: Any = None,
) -> int | None:
    """Apply `fields` to the task if `queryset` still matches it; append events.

    Returns the new last_seq, or None when the queryset matched nothing."""
    updated = queryset.update(last_seq=F("last_seq") + len(events), updated_at=Now(), **fields)
    if not updated:
        return None
    last_seq = Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()
    if events:
        _append_events(task_id, last_seq, events, actor=actor)
    return last_seq


def task_claim(*, task_id: int, owner: str) -> Lease | None:
    """Claim the task if it is claimable and its lease is free: the `start` transition.

    One conditional UPDATE bumps the epoch, sets the lease from the database clock, and counts a
    recovery when the previous holder died while `running` (so a crash loop counts toward the cap).
    Returns None when another worker holds the task, it is parked or terminal, or not yet due.
    The row is locked with SKIP LOCKED first: a claim never waits behind a holder frozen inside a
    transaction (the server cuts that holder off; the sweeper re-drives the task after it).
    """
    start = TASK_TRANSITIONS["start"]
    claimable = Task.objects.filter(
        models.Q(lease_expires_at__isnull=True) | models.Q(lease_expires_at__lt=ClockTimestamp()),
        models.Q(next_run_at__isnull=True) | models.Q(next_run_at__lte=ClockTimestamp()),
        pk=task_id,
        status__in=start.sources,
    )
    with transaction.atomic():
        previous = (
            claimable.select_for_update(skip_locked=True).values_list("status", flat=True).first()
        )
        if previous is None:
            return None
        seq = _update_and_log(
            claimable,
            task_id,
            [
                EventSpec(
                    start.event,
                    payload={"owner": owner, "recovered": previous == TaskStatus.RUNNING},
                    fold={"status": start.target},
                )
            ],
            {
                "status": start.target,
                "lease_epoch": F("lease_epoch") + 1,
                "lease_owner": owner,
                "lease_expires_at": lease_deadline(),
                "next_run_at": None,
                "failure": None,
                "claims": F("claims") + 1,
                "recoveries": F("recoveries")
                + Case(When(status=TaskStatus.RUNNING, then=Value(1)), default=Value(0)),
                "started_at": Case(
                    When(started_at__isnull=True, then=Now()), default=F("started_at")
                ),
            },
        )
        if seq is None:
            return None
        epoch = Task.objects.filter(pk=task_id).values_list("lease_epoch", flat=True).get()
    return Lease(task_id=task_id, epoch=epoch, owner=owner, last_seq=seq)


def fenced_write(
    lease: Lease,
    events: list[EventSpec],
    *,
    transition: str | None = None,
    **fields: Any,
) -> int:
    """Write as the lease holder: renew the lease, apply `fields`, append `events`.

    With `transition`, also move the status along that (fenced) transition. Must run inside the
    caller's transaction. Raises LeaseLost when the epoch moved on or the task left `running`,
    and TypeError for a field this function owns (status, lease, sequence).
    """
    _refuse_owned("fenced_write", fields, TASK_OWNED_FIELDS)
    sources = {TaskStatus.RUNNING}
    if transition is not None:
        spec = TASK_TRANSITIONS[transition]
        assert spec.fenced, f"{transition} is not a lease-holder transition"
        sources = set(spec.sources)
        fields["status"] = spec.target
        events = [*events, EventSpec(spec.event, fold={"status": spec.target})]
        if spec.target != TaskStatus.RUNNING:
            fields["lease_expires_at"] = None
            fields["lease_owner"] = ""
            if spec.target in TERMINAL:
                fields.setdefault("finished_at", Now())
    fields.setdefault("lease_expires_at", lease_deadline())
    prometheus.checkpoint_started()
    seq = lease.last_seq + len(events)
    updated = Task.objects.filter(
        pk=lease.task_id, lease_epoch=lease.epoch, last_seq=lease.last_seq, status__in=sources
    ).update(last_seq=seq, updated_at=Now(), **fields)
    if not updated:
        raise LeaseLost(f"task {lease.task_id}: lease epoch {lease.epoch} is no longer current")
    if events:
        _append_events(lease.task_id, seq, events)
    lease.last_seq = seq
    if fields.get("status") in TERMINAL:
        _terminal_hook(lease.task_id)
    return seq


def step_as_done(step: Step, *, output: Any) -> Step:
    """A copy of `step` as it will read once its `succeed` commits: the runner builds the next
    step's prompt from it before the one write that completes this step and starts the next."""
    done = copy.copy(step)
    done.status = STEP_TRANSITIONS["succeed"].target
    done.output = output
    return done


def task_transition(
    *,
    task_id: int,
    name: str,
    actor: Any = None,
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
    from agentops.engine.children import parent_wake_if_done

    parent_wake_if_done(child_id=task_id)


def task_append_event(*, task_id: int, event: EventSpec, actor: Any = None, **fields: Any) -> int:
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
