"""The sweeper re-drives tasks nobody is advancing.

A claimable task (queued, running, or a due retry) whose lease is free and that has sat longer than
the grace period gets a job, unless a job for its current state is already waiting. This covers a
worker killed mid-slice (its lease expires), a job lost with Redis, and a retry whose time has come;
not a task a stop in force holds (`engine.stops`).
Overdue approval gates take their policy's timeout action (reject, or escalate once).

Any number of sweepers may run (one per machine): the sweep lease (one row, `SweepLease`) lets
one sweep at a time. A sweeper claims it for a sweep and gives it back when the sweep ends; one
that dies while it sweeps holds it until it runs out (SWEEP_LEASE_SECONDS). A row rather than an
advisory lock, because a pooler in transaction mode would hand the lock's session to others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from agentops.engine import stops
from agentops.engine.decisions import gates_expire_overdue
from agentops.engine.dispatch import enqueue_now
from agentops.engine.statements import ClockTimestamp
from agentops.models import SweepLease, Task
from agentops.plumbing import prometheus
from agentops.plumbing.identity import process_identity
from agentops.plumbing.outages import UNAVAILABLE
from agentops.states import TaskStatus

logger = logging.getLogger(__name__)

# Longer than a sweep takes (milliseconds, seconds with a backlog): a sweep that outlasts it may
# overlap the next sweeper's, which re-drives nothing twice (a job's id is its task's state) and
# expires no gate twice (the expiry is conditional).
SWEEP_LEASE_SECONDS = 30


def tasks_to_redrive() -> list[tuple[int, int]]:
    grace = timezone.now() - timedelta(seconds=settings.AGENTOPS["SWEEP_GRACE_SECONDS"])
    lease_free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now())
    stale_queued = Q(status=TaskStatus.QUEUED, updated_at__lt=grace)
    crashed = Q(status=TaskStatus.RUNNING)
    due_retry = Q(status=TaskStatus.RETRY_SCHEDULED, next_run_at__lte=Now())
    return list(
        Task.objects.filter(lease_free)
        .filter(stale_queued | crashed | due_retry)
        # A task a stop in force holds is not claimed: its job would only be refused.
        .exclude(stops.held())
        .order_by("id")
        .values_list("id", "last_seq")
    )


# Other apps' periodic work (each returns how many jobs it enqueued), registered in their
# AppConfig.ready(): the engine calls them without importing them.
SWEEP_HOOKS: list[Callable[[], int]] = []


def sweep_hook_register(hook: Callable[[], int]) -> None:
    if hook not in SWEEP_HOOKS:
        SWEEP_HOOKS.append(hook)


def sweep() -> int:
    """Expire overdue gates, enqueue a job for every task to re-drive, then run the registered
    hooks (the stopped-task SLA and notifications of `reviews`, stranded parents); returns how
    many jobs were enqueued."""
    gates_expire_overdue()
    enqueued = 0
    for task_id, seq in tasks_to_redrive():
        if enqueue_now(task_id, token=seq):
            enqueued += 1
            prometheus.SWEEPER_REDRIVES.inc()
            logger.info("sweeper: re-driving task %s", task_id)
    for hook in SWEEP_HOOKS:
        try:
            enqueued += hook()
        except UNAVAILABLE:
            raise  # the sweep cannot go on: the sweeper waits for the server (plumbing.outages)
        except Exception:
            # One hook's bug must not stop the re-drives and the other hooks.
            logger.exception("sweeper: hook %s failed", getattr(hook, "__name__", hook))
    return enqueued


@dataclass(frozen=True)
class Sweep:
    """One sweep done under the lock: when it held the lock (wall clock) and what it enqueued."""

    started: float
    ended: float
    enqueued: int


def sweep_exclusive() -> Sweep | None:
    """`sweep()` while holding the sweep lease; None (and nothing done) when another sweeper
    holds it."""
    holder = process_identity()
    if not sweep_lease_claim(holder):
        return None
    try:
        started = time.time()
        enqueued = sweep()
        return Sweep(started=started, ended=time.time(), enqueued=enqueued)
    finally:
        SweepLease.objects.filter(pk=1, holder=holder).update(expires_at=ClockTimestamp())


# One row (id 1), written by whichever sweeper claims it first: a flushed table needs no setup.
SWEEP_LEASE_CLAIM = """
INSERT INTO agentops_sweeplease AS lease (id, holder, expires_at)
VALUES (1, %(holder)s, clock_timestamp() + make_interval(secs => %(seconds)s))
ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE lease.expires_at IS NULL OR lease.expires_at <= clock_timestamp()
    OR lease.holder = excluded.holder
RETURNING lease.id
"""


def sweep_lease_claim(holder: str) -> bool:
    """Whether `holder` now holds the sweep lease (it was free, ran out, or is its own)."""
    with connection.cursor() as cursor:
        cursor.execute(SWEEP_LEASE_CLAIM, {"holder": holder, "seconds": SWEEP_LEASE_SECONDS})
        return cursor.fetchone() is not None
