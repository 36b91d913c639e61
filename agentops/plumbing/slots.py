"""Database slots: a process's greenlets or threads share a fixed set of persistent connections.

Django keeps a database connection per thread, and to Django a greenlet is a thread too. Two kinds
of process run many of either, and unbounded each would open a connection of its own:

- Under gunicorn's gevent workers, at most `AGENTOPS_WEB_SLOTS` requests per web process reach
  the database at once. A gevent worker reads every client in a greenlet of its own, so clients
  that trickle their headers cost a greenlet each and hold up nobody. A request takes a slot
  before it reaches the session, the views or the database (`DatabaseSlotMiddleware`, after
  WhiteNoise: static files and `/healthz` need none); `/readyz` takes one for its checks too. A
  request body is read in full before the slot is taken. A request that finds no slot free
  within `AGENTOPS_WEB_SLOT_WAIT_SECONDS` is answered 503.
- A worker that advances several tasks at once (`manage.py worker --tasks N`, one thread per
  task) shares `AGENTOPS_WORKER_DB_SLOTS` connections among them (`worker_slots_install`). A task
  holds a slot for its job, and lends it back while it waits on the outside world (a model or a
  tool call, `Heartbeat.call`: `Slots.lend`), so a hundred tasks waiting on their models hold no
  connection. The lease heartbeats share one more connection of their own (`lease_slot`).

The slot's connection (persistent for `CONN_MAX_AGE`, health checked, as Django's request
boundaries would do) is bound to the greenlet or thread while it holds the slot. Elsewhere (a
threaded server, the test client, management commands, a worker with one task) Django's
per-thread connections are bounded by the threads already: `database_slot()` does nothing.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, HttpResponse

from agentops.plumbing.web import body_too_big

logger = logging.getLogger(__name__)


class NoSlotFree(Exception):
    """Every slot stayed taken for the whole wait."""


class Slots:
    """A fixed set of database connections, lent to one greenlet (`green`) or thread at a time."""

    def __init__(self, size: int, wait_seconds: float, *, green: bool) -> None:
        if green:
            from gevent.local import local as held
            from gevent.queue import LifoQueue
        else:
            from queue import LifoQueue  # type: ignore[assignment]
            from threading import local as held  # type: ignore[assignment]
        # Last in, first out: the connection used most recently is the one most likely alive.
        self._free: Any = LifoQueue()
        for _ in range(size):
            self._free.put(None)  # the slot's connection is made on its first use
        # The connection the current greenlet or thread holds, if any.
        self._held: Any = held()
        self.size = size
        self.wait_seconds = wait_seconds

    @contextmanager
    def hold(self) -> Iterator[None]:
        self._take()
        try:
            yield
        finally:
            self._give()

    def lend(self) -> bool:
        """Give back the slot this greenlet or thread holds (False: it holds none). Its
        connection must have no transaction open (the caller checks, `outbound_check`)."""
        if getattr(self._held, "wrapper", None) is None:
            return False
        self._give()
        return True

    def take_back(self) -> None:
        """Take a slot again after `lend` (waiting for a free one as `hold` does)."""
        self._take()

    def _take(self) -> None:
        from queue import Empty  # gevent's queues raise the standard library's

        try:
            wrapper = self._free.get(timeout=self.wait_seconds)
        except Empty:
            raise NoSlotFree from None
        if wrapper is None:
            wrapper = connections.create_connection(DEFAULT_DB_ALIAS)
            # Lent to one greenlet or thread at a time, never used by two at once.
            wrapper.inc_thread_sharing()
        connections[DEFAULT_DB_ALIAS] = wrapper
        self._held.wrapper = wrapper
        try:
            wrapper.close_if_unusable_or_obsolete()
        except BaseException:
            self._give()
            raise

    def _give(self) -> None:
        wrapper = getattr(self._held, "wrapper", None)
        if wrapper is None:
            return  # lent, and not taken back (no slot came free)
        self._held.wrapper = None
        try:
            wrapper.close_if_unusable_or_obsolete()
        finally:
            del connections[DEFAULT_DB_ALIAS]
            self._free.put(wrapper)


def gevent_patched() -> bool:
    """True in a gunicorn gevent worker (the standard library is monkey-patched)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey and monkey.is_module_patched("threading"))


@cache
def web_slots() -> Slots | None:
    """This process's slots, or None outside gevent."""
    if not gevent_patched():
        return None
    from gevent.local import local

    # Django keeps connections in a thread-local made when django.db is first imported; made
    # before gevent patched threading, it would be one for all greenlets of the process, and a
    # slot's connection bound to one request would be seen by every other.
    storage = getattr(getattr(connections, "_connections", None), "_storage", None)
    if storage is not None and not isinstance(storage, local):
        raise ImproperlyConfigured(
            "django.db was imported before gevent patched the standard library: import "
            "nothing of Django in gunicorn's master process (agentops.gunicorn_conf)"
        )
    return Slots(
        settings.AGENTOPS["WEB_SLOTS"], settings.AGENTOPS["WEB_SLOT_WAIT_SECONDS"], green=True
    )


_worker_slots: Slots | None = None
_lease_slot: Slots | None = None


def worker_slots_install(size: int, wait_seconds: float) -> Slots:
    """Make this worker process's slots, shared by the threads it advances tasks on, and the one
    its lease heartbeats share (`lease_slot`)."""
    global _worker_slots, _lease_slot
    _worker_slots = Slots(size, wait_seconds, green=False)
    _lease_slot = Slots(1, wait_seconds, green=False)
    return _worker_slots


def process_slots() -> Slots | None:
    """This process's slots: a gevent web process's, a worker's with several tasks, or None."""
    return _worker_slots or web_slots()


@contextmanager
def database_slot() -> Iterator[None]:
    """Hold a database slot for the block (nothing to hold in a process without slots)."""
    slots = process_slots()
    if slots is None:
        yield
        return
    with slots.hold():
        yield


@contextmanager
def lease_slot() -> Iterator[None]:
    """Hold the lease heartbeats' slot for the block (a worker with several tasks; nothing to
    hold elsewhere). Their connection is their own: a renewal never waits behind the tasks, nor
    a task's end (which joins its heartbeat, holding its task's slot) behind its renewal."""
    if _lease_slot is None:
        yield
        return
    with _lease_slot.hold():
        yield


class DatabaseSlotMiddleware:
    """Let a request past only while it holds a database slot."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        web_slots()  # made when the worker loads the application: a misconfiguration stops it

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if process_slots() is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
            # The whole body first (at most DATA_UPLOAD_MAX_MEMORY_SIZE, else 400): a client
            # that sends it slowly then holds its own greenlet, not a database slot.
            try:
                request.body  # noqa: B018
            except RequestDataTooBig:
                return body_too_big(request)
        try:
            with database_slot():
                return self.get_response(request)
        except NoSlotFree:
            logger.warning("no database slot free: answered 503")
            response = HttpResponse(
                "The server is busy; try again in a moment.\n",
                status=503,
                content_type="text/plain",
            )
            response["Retry-After"] = "5"
            return response
