"""The sweeper loop: re-drive stalled tasks and expire overdue gates, one sweeper at a time.

The loop outlives PostgreSQL restarts and Redis outages: a sweep that finds either away is given
up, and the next is tried after a capped backoff (agentops.plumbing.outages), so sweeping resumes
within one capped wait of the server's return. Only `--once` reports the failure and exits.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections, connection

from agentops.engine.sweeper import Sweep, sweep_exclusive
from agentops.plumbing.outages import POSTGRESQL, REDIS, UNAVAILABLE, Outage, dependency_of
from agentops.plumbing.postgres import limits_checked_at_start


class Command(BaseCommand):
    help = "Re-enqueue tasks whose lease expired, whose job vanished, or whose retry is due."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="sweep once and exit")
        parser.add_argument("--interval", type=float, default=None, help="seconds between sweeps")

    def handle(
        self, *args: object, once: bool, interval: float | None, verbosity: int, **options: object
    ) -> None:
        limits_checked_at_start()
        interval = interval or settings.AGENTOPS["SWEEP_INTERVAL_SECONDS"]
        outages = {POSTGRESQL: Outage(POSTGRESQL), REDIS: Outage(REDIS)}
        while True:
            close_old_connections()
            try:
                done = sweep_exclusive()
            except UNAVAILABLE as error:
                if once:
                    raise
                # The connection may be dead (a restart) or inside a broken transaction: the
                # next sweep opens a new one.
                connection.close()
                time.sleep(outages[dependency_of(error)].failed(error))
                continue
            for outage in outages.values():
                outage.recovered()
            self._report(done, once=once, verbosity=verbosity)
            if once:
                return
            time.sleep(interval)

    def _report(self, done: Sweep | None, *, once: bool, verbosity: int) -> None:
        if done is None:
            if verbosity >= 2 or once:
                self.stdout.write("sweeper: skipped, another sweeper is sweeping")
            return
        if done.enqueued:
            self.stdout.write(f"sweeper: enqueued {done.enqueued} job(s)")
        if verbosity >= 2:
            self.stdout.write(f"sweep start={done.started:.6f} end={done.ended:.6f}")
