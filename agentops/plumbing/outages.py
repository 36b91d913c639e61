"""Riding out an outage of PostgreSQL or Redis in a long-running process (workers, the sweeper).

A worker or sweeper that loses its database or its queue waits and tries again instead of
exiting: without a supervisor, nothing else would re-drive expired leases. The waits grow from
`RECONNECT_BASE_SECONDS` by doubling up to `RECONNECT_MAX_SECONDS`, with jitter, so that the
processes that lost one server do not all come back in the same instant, and so that a server back
from a restart is used again within one capped wait. The log gets one line when an outage starts,
at most one per `RECONNECT_LOG_EVERY_SECONDS` while it lasts, and one when it ends; each carries
the dependency's name, so an operator can grep one outage from start to end.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

logger = logging.getLogger(__name__)

POSTGRESQL = "postgresql"
REDIS = "redis"

# A server that went away, is starting up or shutting down, refused or dropped the connection,
# or made a statement wait past its limits: worth waiting for. Django wraps the driver's errors,
# but code that uses the driver's connection directly (prepared statements) raises them bare.
DATABASE_ERRORS: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
REDIS_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
UNAVAILABLE: tuple[type[Exception], ...] = DATABASE_ERRORS + REDIS_ERRORS


def exponential_backoff(attempt: int, *, base: float, cap: float) -> float:
    """`base * 2**(attempt - 1)` capped at `cap`, plus up to 25% jitter (attempt counts from 1)."""
    delay = min(cap, base * 2.0 ** max(attempt - 1, 0))
    return delay * (1 + random.uniform(0, 0.25))


def dependency_of(error: BaseException) -> str:
    """Which server an error in `UNAVAILABLE` is about."""
    return REDIS if isinstance(error, REDIS_ERRORS) else POSTGRESQL


def _describe(error: BaseException) -> str:
    """The error's class and first line: driver messages can run to several lines."""
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first_line}"[:200]


@dataclass
class Outage:
    """One dependency's outage as one process sees it: when it began, how many tries failed since,
    and when it was last logged. Used by one thread."""

    dependency: str
    since: float | None = None
    failures: int = 0
    logged_at: float = 0.0

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, error: BaseException) -> float:
        """Note a failed try; log the outage's start (or, at a bounded rate, that it goes on);
        return how many seconds to wait before the next try."""
        conf = settings.AGENTOPS
        now = time.monotonic()
        self.failures += 1
        delay = exponential_backoff(
            self.failures,
            base=float(conf["RECONNECT_BASE_SECONDS"]),
            cap=float(conf["RECONNECT_MAX_SECONDS"]),
        )
        fields = {
            "dependency": self.dependency,
            "attempt": self.failures,
            "retry_in_seconds": round(delay, 2),
            "error": _describe(error),
        }
        if self.since is None:
            self.since = self.logged_at = now
            logger.warning("%s unavailable; reconnecting", self.dependency, extra=fields)
        elif now - self.logged_at >= float(conf["RECONNECT_LOG_EVERY_SECONDS"]):
            self.logged_at = now
            fields["down_seconds"] = round(now - self.since, 1)
            logger.warning("%s still unavailable", self.dependency, extra=fields)
        return delay

    def recovered(self) -> None:
        """Note a try that worked: log the end of the outage, if there was one."""
        if self.since is None:
            return
        down = time.monotonic() - self.since
        logger.info(
            "%s reconnected",
            self.dependency,
            extra={
                "dependency": self.dependency,
                "attempt": self.failures,
                "down_seconds": round(down, 1),
            },
        )
        self.since = None
        self.failures = 0


def database_answers() -> None:
    """Open a fresh connection and ask PostgreSQL one question; raises while it is away.

    The old connection is dropped first: after a server restart it is dead, and after an error
    inside a transaction it is unusable until closed."""
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def wait_until(
    probe: Callable[[], object], outage: Outage, first_error: BaseException | None = None
) -> None:
    """Call `probe` until it stops raising `UNAVAILABLE` errors, waiting `outage`'s backoff
    between tries; returns once it worked (logging the recovery, if there was an outage)."""
    error = first_error
    while True:
        if error is not None:
            time.sleep(outage.failed(error))
        try:
            probe()
        except UNAVAILABLE as exc:
            error = exc
            continue
        outage.recovered()
        return
