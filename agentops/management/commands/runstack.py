"""`make run`: web, simulated services, two workers and the sweeper, as child processes.

With REDIS_URL unset it starts an embedded Redis; with DATABASE_URL unset the settings fall back
to SQLite in WAL mode. Ctrl-C stops every child.
"""

from __future__ import annotations

import os
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from agentops.devstack import Stack
from agentops.scenarios import TOOL_TIMEOUT


class Command(BaseCommand):
    help = "Run the whole product locally: web, sim services, 2 workers, sweeper, demo data."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--workers", type=int, default=2)

    def handle(self, *args, port: int, workers: int, **options) -> None:
        stack = Stack()
        # Seeded scenarios inject timeouts that outlast this tool timeout (see agentops.scenarios).
        stack.env.setdefault("AGENTOPS_TOOL_TIMEOUT_SECONDS", TOOL_TIMEOUT)
        try:
            stack.manage("migrate", "--no-input", "-v", "0")
            sim = stack.start_sim(port + 1)
            stack.manage("seed_demo")
            stack.spawn("runserver", f"127.0.0.1:{port}", "--noreload")
            for number in range(workers):
                stack.spawn("worker", "--name", f"worker-{number + 1}-{os.getpid()}")
            stack.spawn("sweeper")
            database = settings.DATABASES["default"]
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nagentops is running at http://127.0.0.1:{port}/\n"
                    f"  logins:   admin / admin (see the README for the other demo users)\n"
                    f"  database: {database['ENGINE'].rsplit('.', 1)[-1]} {database['NAME']}\n"
                    f"  redis:    {'embedded ' if stack.redis else ''}{stack.env['REDIS_URL']}\n"
                    f"  sim:      {sim}\n"
                    f"  {workers} workers and the sweeper are running. Ctrl-C stops everything.\n"
                )
            )
            self._wait(stack)
        finally:
            stack.stop()
            self.stdout.write("stopped")

    def _wait(self, stack: Stack) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while not stopping:
            if stack.any_exited():
                self.stderr.write("a child process exited; stopping everything")
                return
            time.sleep(0.5)
