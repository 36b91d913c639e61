from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from agentops.engine.sweeper import sweep


class Command(BaseCommand):
    help = "Re-enqueue tasks whose lease expired, whose job vanished, or whose retry is due."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--once", action="store_true", help="sweep once and exit")
        parser.add_argument("--interval", type=float, default=None, help="seconds between sweeps")

    def handle(self, *args, once: bool, interval: float | None, **options) -> None:
        interval = interval or settings.AGENTOPS["SWEEP_INTERVAL_SECONDS"]
        while True:
            close_old_connections()
            count = sweep()
            if count:
                self.stdout.write(f"sweeper: enqueued {count} job(s)")
            if once:
                return
            time.sleep(interval)
