"""The sweeper loop: re-drive stalled tasks and expire overdue gates, one sweeper at a time."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from agentops.engine.sweeper import sweep_exclusive


class Command(BaseCommand):
    help = "Re-enqueue tasks whose lease expired, whose job vanished, or whose retry is due."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--once", action="store_true", help="sweep once and exit")
        parser.add_argument("--interval", type=float, default=None, help="seconds between sweeps")

    def handle(self, *args, once: bool, interval: float | None, verbosity: int, **options) -> None:
        interval = interval or settings.AGENTOPS["SWEEP_INTERVAL_SECONDS"]
        while True:
            close_old_connections()
            done = sweep_exclusive()
            if done is None:
                if verbosity >= 2 or once:
                    self.stdout.write("sweeper: skipped, another sweeper is sweeping")
            else:
                if done.enqueued:
                    self.stdout.write(f"sweeper: enqueued {done.enqueued} job(s)")
                if verbosity >= 2:
                    self.stdout.write(f"sweep start={done.started:.6f} end={done.ended:.6f}")
            if once:
                return
            time.sleep(interval)
