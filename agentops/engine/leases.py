"""Lease upkeep while a call is in flight: a heartbeat thread that renews the holder's lease.

The heartbeat uses its own database connection and the same epoch fence as every other write, so
when another worker has taken the task over the renewal changes zero rows, the heartbeat notes it,
and the holder raises LeaseLost as soon as its call returns.

In a worker that advances several tasks at once (agentops.plumbing.slots), a call lends its
task's database slot back while it waits, and the renewals share a slot of their own.
"""

from __future__ import annotations

import threading
from types import TracebackType

from django.conf import settings
from django.db import connection

from agentops.engine.errors import LeaseLost
from agentops.engine.outbound import outbound_check
from agentops.engine.transitions import Lease, lease_deadline
from agentops.models import Task
from agentops.plumbing.outages import DATABASE_ERRORS
from agentops.plumbing.slots import NoSlotFree, Slots, lease_slot, process_slots
from agentops.states import TaskStatus


def lease_renew(lease: Lease) -> bool:
    deadline = lease_deadline()
    return bool(
        Task.objects.filter(
            pk=lease.task_id, lease_epoch=lease.epoch, status=TaskStatus.RUNNING
        ).update(lease_expires_at=deadline)
    )


class Heartbeat:
    """Renew `lease` every third of its length while armed, from one thread per task run.

    `with Heartbeat(lease):` is armed for the whole block. The runner starts one disarmed and arms
    it around each external call with `call()`: one thread per run instead of one per call, and a
    worker wedged outside a call still lets its lease lapse.
    """

    def __init__(self, lease: Lease, *, armed: bool = True) -> None:
        self.lease = lease
        self.interval = settings.AGENTOPS["LEASE_SECONDS"] / 3
        self.lost = False
        self._stop = threading.Event()
        # Read by the heartbeat's thread, written by the runner's: a plain flag (one attribute
        # store is atomic), as nothing waits on it.
        self._armed = armed
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                if self._armed and not self._renew():
                    self.lost = True
                    return
        finally:
            connection.close()

    def _renew(self) -> bool:
        """Renew the lease; False when it is gone. A renewal that cannot reach the database
        proves nothing: the next one tries again on a new connection (after a short blip the
        lease is still held; if it ran out meanwhile, the epoch fence stops the holder's next
        write). So does one that found no database slot free."""
        try:
            with lease_slot():
                return lease_renew(self.lease)
        except NoSlotFree:
            return True
        except DATABASE_ERRORS:
            connection.close()
            return True

    def call(self) -> _CallBlock:
        """Keep the lease alive during one external call; raise LeaseLost after it if a renewal
        found the lease gone. The call must not be made inside a transaction (checked)."""
        return _CallBlock(self)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is None:
            self.raise_if_lost()

    def raise_if_lost(self) -> None:
        """LeaseLost if a renewal found the lease gone."""
        if self.lost:
            raise LeaseLost(f"task {self.lease.task_id}: lease lost during a call")


class _CallBlock:
    """The block of `Heartbeat.call` (two per step: a class, not a generator's context
    manager, which costs twice the calls). Checked on entry; on a normal exit, LeaseLost if a
    renewal found the lease gone; an error of the call itself goes on as it is."""

    __slots__ = ("beat", "lent")

    def __init__(self, beat: Heartbeat) -> None:
        self.beat = beat
        self.lent: Slots | None = None

    def __enter__(self) -> None:
        outbound_check(f"task {self.beat.lease.task_id}: an external call")
        self.beat._armed = True
        # The call holds no database connection while it waits (a worker with several tasks).
        slots = process_slots()
        self.lent = slots if slots is not None and slots.lend() else None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.lent is not None:
                self._take_back(self.lent)  # armed still: the lease lives while it waits
        finally:
            self.beat._armed = False
        if exc_type is None:
            self.beat.raise_if_lost()

    def _take_back(self, slots: Slots) -> None:
        """Take a database slot again after the call. When none comes free, nothing can be
        recorded: the run stops as if it had lost the lease, and the sweeper re-drives the task
        once the lease lapses."""
        try:
            slots.take_back()
        except NoSlotFree:
            raise LeaseLost(
                f"task {self.beat.lease.task_id}: no database slot came free after a call "
                f"within {slots.wait_seconds:g} s (the worker's connections stayed busy)"
            ) from None
