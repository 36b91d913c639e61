"""The fleet's stop button (EU AI Act Art. 14(4)(e)): a person stops every task of an agent, of
a tool, or all of them, and lifts the stop to resume them.

A stop is a row (`FleetStop`) in force until lifted. Making an `all` or `agent` stop pauses, in
its transaction, the tasks it covers that no worker holds (queued, waiting for a retry, or
running with a lease run out); a task it covers is not claimed while it is in force (the claim
statement in `transitions`, and the sweeper by `held`, leave it). A task a worker holds is not
paused from outside, which would revoke the lease and leave a call in flight unrecorded: its
worker learns of the stop at its next safe point (`safe_point_check`), after its last commit,
before a model call and before a tool call (before the `pending` row is written, so no call is
left half-done), and pauses the task there itself (`task_halt`), keeping a new model result;
a call already sent has finished and is recorded by then. A `tool` stop works at the safe
point before that tool's calls alone. At a safe point a revoked lease (a person paused the
task) stops the worker too (`LeaseLost`). Lifting a stop resumes the tasks whose last pause was
by it, and enqueues the queued tasks it held.

The check is one read per safe point (the task's epoch and status, and the stops in force: a
tiny table behind a partial index); its cost is in docs/operations.md.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now

from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import AgentOpsError, LeaseLost, TransitionRefused
from agentops.engine.gates import resume_events_enqueue, resume_or_refuse
from agentops.engine.jsonvalues import redacted
from agentops.engine.registry import agents, tool_entries
from agentops.engine.statements import prepared_cursor
from agentops.engine.transitions import Lease, task_transition
from agentops.models import Event, FleetStop, StopScope, Task
from agentops.states import TASK_TRANSITIONS, TaskStatus
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

PAUSED_EVENT = TASK_TRANSITIONS["pause"].event
# What a stop pauses when it is made: a task a worker holds or will soon claim. A task parked
# for a person (a gate, a stop for attention) or waiting on its children stays as it is: it
# runs nothing, and when it comes back to the queue the claim holds it while the stop is in force.
STOPPABLE = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RETRY_SCHEDULED})


class StopRefused(AgentOpsError):
    """The stop or its lift cannot be made as asked; the message says why."""


class StopConflict(StopRefused):
    """The same stop is already in force, or the stop was already lifted: someone acted first."""


class StopReached(BaseException):
    """A stop in force covers the step at this safe point: the worker pauses its task here.
    A BaseException, like `LeaseLost`, so that no `except Exception` swallows it."""

    def __init__(self, stop_id: int) -> None:
        super().__init__(f"stop {stop_id} is in force")
        self.stop_id = stop_id


@dataclass(frozen=True)
class StopMade:
    stop: FleetStop
    # Paused by the stop's transaction (no worker held them).
    paused: list[int]
    # Held by a worker then: each is paused by its worker at its next safe point.
    running: list[int]


@dataclass(frozen=True)
class StopLifted:
    stop: FleetStop
    resumed: list[int]
    released: list[int]


def covering(agent: str | None, tool: str | None = None) -> Q:
    """The stops in force that cover a task of `agent` (about to call `tool`)."""
    covers = Q(scope=StopScope.ALL)
    if agent is not None:
        covers |= Q(scope=StopScope.AGENT, target=agent)
    if tool is not None:
        covers |= Q(scope=StopScope.TOOL, target=tool)
    return Q(lifted_at__isnull=True) & covers


def held() -> Exists:
    """Whether a stop in force holds the outer task (`all`, or its agent): the sweeper leaves it."""
    return Exists(
        FleetStop.objects.filter(lifted_at__isnull=True).filter(
            Q(scope=StopScope.ALL) | Q(scope=StopScope.AGENT, target=OuterRef("agent"))
        )
    )


def stop_targets() -> dict[str, list[str]]:
    """The names a stop may target, by scope: the registered agents and the known tools."""
    return {
        StopScope.AGENT: [agent.name for agent in agents()],
        StopScope.TOOL: sorted(tool_entries()),
    }


def _check_target(scope: str, target: str) -> str:
    if scope not in StopScope.values:
        raise StopRefused(
            Phrase(
                gettext_noop("unknown scope %(scope)s (choose one of %(scopes)s)"),
                {"scope": repr(scope), "scopes": ", ".join(StopScope.values)},
            )
        )
    target = target.strip()
    if scope == StopScope.ALL:
        if target:
            raise StopRefused(Phrase(gettext_noop("a stop of every task names no agent or tool")))
        return ""
    known = stop_targets()[scope]
    if target not in known:
        names = {"target": repr(target), "known": ", ".join(known) or "none"}
        if scope == StopScope.AGENT:
            raise StopRefused(
                Phrase(gettext_noop("no agent is named %(target)s (known: %(known)s)"), names)
            )
        raise StopRefused(
            Phrase(gettext_noop("no tool is named %(target)s (known: %(known)s)"), names)
        )
    return target


def fleet_stop(*, scope: str, target: str = "", reason: str, actor: User | None) -> StopMade:
    """Stop every task of `target` (an agent or a tool) or, with scope `all`, every task.

    In one transaction: the stop's row, then each covered task no worker holds (queued, waiting
    for a retry, or running with its lease run out) is paused (oldest first; its event names
    the stop). A running task's worker pauses it at its next safe point: a call in flight
    finishes and is recorded first. Raises StopRefused
    for an unknown scope or target, a missing reason, or a stop of the same scope and target
    already in force (a double click stops once)."""
    target = _check_target(scope, target)
    reason = reason.strip()
    if not reason:
        raise StopRefused(
            Phrase(gettext_noop("say why you stop them: the reason is kept in the decision log"))
        )
    try:
        with transaction.atomic():
            stop = FleetStop.objects.create(
                scope=scope,
                target=target,
                reason=redacted(reason),
                stopped_by=actor if getattr(actor, "pk", None) else None,
                stopped_by_label=getattr(actor, "username", "") or "system",
            )
            paused, running = _pause_covered(stop, actor=actor)
            if paused:
                FleetStop.objects.filter(pk=stop.pk).update(paused_at_stop=len(paused))
                stop.paused_at_stop = len(paused)
    except IntegrityError:
        if scope == StopScope.ALL:
            raise StopConflict(Phrase(gettext_noop("every task is already stopped"))) from None
        raise StopConflict(
            Phrase(
                gettext_noop("%(scope)s %(target)s is already stopped"),
                {"scope": scope, "target": target},
            )
        ) from None
    logger.warning("stop %s of %s: paused %d tasks", stop.pk, _named(scope, target), len(paused))
    return StopMade(stop=stop, paused=paused, running=running)


def _named(scope: str, target: str) -> str:
    return "every task" if scope == StopScope.ALL else f"{scope} {target}"


def _pause_covered(stop: FleetStop, *, actor: User | None) -> tuple[list[int], list[int]]:
    """Pause the covered tasks no worker holds (queued, waiting for a retry, or running with
    a lease run out); returns them, and the running tasks a worker holds, which their worker
    pauses at its next safe point (so that a call in flight finishes and is recorded)."""
    if stop.scope == StopScope.TOOL:
        return [], []  # a tool's calls are stopped where they would be made (`safe_point_check`)
    covered = Task.objects.all()
    if stop.scope == StopScope.AGENT:
        covered = covered.filter(agent=stop.target)
    unheld = Q(status__in=STOPPABLE - {TaskStatus.RUNNING}) | Q(
        status=TaskStatus.RUNNING, lease_expires_at__lt=Now()
    )
    paused = []
    for task_id in covered.filter(unheld).order_by("id").values_list("id", flat=True):
        # Still unheld, and locked against a claim (which skips locked rows): a worker that
        # claimed it since the list was read holds its lease, and pauses it at its safe point.
        still = Task.objects.select_for_update(skip_locked=True).filter(unheld, pk=task_id)
        if not list(still.values_list("id", flat=True)):
            continue
        if task_transition(task_id=task_id, name="pause", actor=actor, payload=_said(stop)):
            paused.append(task_id)
    running = covered.filter(status=TaskStatus.RUNNING, lease_expires_at__gte=Now())
    return paused, list(running.order_by("id").values_list("id", flat=True))


def _said(stop: FleetStop, **more: object) -> dict[str, object]:
    return {"stop": stop.pk, "reason": stop.reason, **more}


def fleet_resume(*, stop_id: int, actor: User | None, reason: str = "") -> StopLifted:
    """Lift the stop and resume what it stopped: each task whose last pause was this stop's
    goes back to the queue with its job; the queued tasks it held get their job. A task a
    person paused on their own stays paused; a task another stop in force covers is queued
    and held by that one. Raises StopRefused when the stop is already lifted."""
    from django.utils import timezone

    with transaction.atomic():
        stop = FleetStop.objects.select_for_update().filter(pk=stop_id).first()
        if stop is None:
            raise StopRefused(Phrase(gettext_noop("there is no stop %(stop)s"), {"stop": stop_id}))
        if stop.lifted_at is not None:
            raise StopConflict(
                Phrase(
                    gettext_noop("stop %(stop)s was already lifted by %(who)s"),
                    {"stop": stop_id, "who": stop.lifted_by_label},
                )
            )
        stop.lifted_at = timezone.now()
        stop.lifted_by = actor if getattr(actor, "pk", None) else None
        stop.lifted_by_label = getattr(actor, "username", "") or "system"
        stop.lift_reason = redacted(reason.strip())
        stop.save(update_fields=["lifted_at", "lifted_by", "lifted_by_label", "lift_reason"])
        # The queued tasks it held, before the paused ones join them.
        held_ids = _queued_held(stop)
        resumed = []
        for task_id in paused_by(stop.pk):
            resume_or_refuse(task_id, actor=actor, reason=reason or f"stop {stop.pk} lifted")
            resume_events_enqueue(task_id, actor=actor, events=[])
            resumed.append(task_id)
        for task_id, seq in held_ids:
            task_enqueue(task_id, token=seq)
        released = [task_id for task_id, _ in held_ids]
    logger.warning("stop %s lifted: resumed %d tasks", stop.pk, len(resumed))
    return StopLifted(stop=stop, resumed=resumed, released=released)


def paused_by(stop_id: int) -> list[int]:
    """The paused tasks whose last pause was by stop `stop_id`, locked, oldest first."""
    candidates = (
        Task.objects.select_for_update(of=("self",))
        .filter(status=TaskStatus.PAUSED)
        .filter(
            Exists(
                Event.objects.filter(
                    task_id=OuterRef("pk"), action=PAUSED_EVENT, payload__stop=stop_id
                )
            )
        )
        .order_by("id")
        .values_list("id", flat=True)
    )
    ids = list(candidates)
    last: dict[int, int | None] = {}
    for task_id, payload in (
        Event.objects.filter(task_id__in=ids, action=PAUSED_EVENT)
        .order_by("task_id", "seq")
        .values_list("task_id", "payload")
    ):
        last[task_id] = (payload or {}).get("stop")
    return [task_id for task_id in ids if last.get(task_id) == stop_id]


def _queued_held(stop: FleetStop) -> list[tuple[int, int]]:
    """The queued tasks the stop held at their claim (none for a `tool` stop), with their last
    seq (their job's token)."""
    if stop.scope == StopScope.TOOL:
        return []
    queued = Task.objects.filter(status=TaskStatus.QUEUED)
    if stop.scope == StopScope.AGENT:
        queued = queued.filter(agent=stop.target)
    return list(queued.order_by("id").values_list("id", "last_seq"))


def stops_in_force() -> list[FleetStop]:
    """The stops in force, newest first (the banner every page shows)."""
    return list(FleetStop.objects.filter(lifted_at__isnull=True).order_by("-created_at", "-id"))


# -- the worker's side ----------------------------------------------------------------------


@functools.cache
def _safe_point_statement() -> str:
    task, stops = Task._meta.db_table, FleetStop._meta.db_table
    return (
        f'SELECT (SELECT "lease_epoch" = %s AND "status" = %s FROM "{task}" WHERE "id" = %s), '
        f'(SELECT "id" FROM "{stops}" WHERE "lifted_at" IS NULL AND ("scope" = %s OR '
        '("scope" = %s AND "target" = %s) OR ("scope" = %s AND "target" = %s)) '
        'ORDER BY "id" LIMIT 1)'
    )


def safe_point_check(lease: Lease, *, agent: str, tool: str | None) -> None:
    """At a safe point (after the task's last commit, before a model call, or before a tool
    call when `tool` is given): raise LeaseLost when the lease is no longer this holder's (a
    person paused or stopped the task), and StopReached when a stop in force covers the step.
    One statement; nothing is written."""
    params = [
        lease.epoch,
        TaskStatus.RUNNING.value,
        lease.task_id,
        StopScope.ALL.value,
        StopScope.AGENT.value,
        agent,
        StopScope.TOOL.value,
        tool,
    ]
    with prepared_cursor() as cursor:
        cursor.execute(_safe_point_statement(), params)
        holding, stop_id = cursor.fetchone()
    if not holding:
        raise LeaseLost(f"task {lease.task_id}: paused or stopped before its next call")
    if stop_id is not None:
        raise StopReached(stop_id)


def stop_in_force_locked(stop_id: int) -> FleetStop | None:
    """The stop, its row locked for the caller's transaction (against its lift, which locks it
    first), or None when it has been lifted."""
    stop = FleetStop.objects.select_for_update(no_key=True).filter(pk=stop_id).first()
    return stop if stop is not None and stop.lifted_at is None else None


def task_halt(*, task_id: int, stop: FleetStop, at: str, tool: str | None) -> None:
    """Pause the task the caller holds at a safe point, because `stop` (in force, its row
    locked: `stop_in_force_locked`) covers its step. Caller holds the transaction and has just
    written a fenced commit in it (which checked its lease and locked the task's row). Raises
    TransitionRefused when the task is not running."""
    said = _said(stop, at=at, **({"tool": tool} if tool else {}))
    if not task_transition(task_id=task_id, name="pause", actor=None, payload=said):
        raise TransitionRefused(f"task {task_id} is no longer running; not paused by stop")
