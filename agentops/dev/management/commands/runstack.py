"""`make run`: web (gunicorn), simulated services, two workers, a notices' worker and the sweeper,
as children.

With DATABASE_URL / REDIS_URL unset the settings have started (or reused) the embedded PostgreSQL
and Redis servers. A worker or the sweeper that exits is started again (one that keeps exiting
stops the stack); the web or the simulated services exiting stops it. Ctrl-C stops every child,
and the embedded servers this command started.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.dev import embedded
from agentops.dev.devstack import Stack, port_taken, wait_until_answers
from agentops.dev.scenarios import TOOL_TIMEOUT


class Command(BaseCommand):
    help = "Run the whole product locally: web, sim services, 2 workers, sweeper, demo data."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--workers", type=int, default=2)

    def handle(self, *args: object, port: int, workers: int, **options: object) -> None:
        stack = Stack()
        # Seeded scenarios inject timeouts that outlast this tool timeout (agentops.dev.scenarios).
        stack.env.setdefault("AGENTOPS_TOOL_TIMEOUT_SECONDS", TOOL_TIMEOUT)
        # Links in notifications point at this web server unless an operator says otherwise.
        stack.env.setdefault("AGENTOPS_PUBLIC_URL", f"http://127.0.0.1:{port}")
        if "PROMETHEUS_MULTIPROC_DIR" not in stack.env:
            # Every child counts into one fresh directory, so /metrics sums them all.
            metrics_dir = settings.DATA_DIR / "prometheus"
            shutil.rmtree(metrics_dir, ignore_errors=True)
            metrics_dir.mkdir(parents=True)
            stack.env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        try:
            taken = [number for number in (port, port + 1) if port_taken(number)]
            if taken:
                raise CommandError(
                    f"port {taken[0]} is in use (the web takes {port}, the simulated services "
                    f"{port + 1}): stop what runs there, or choose others with make run PORT=N"
                )
            stack.manage("migrate", "--no-input", "-v", "0")
            sim = stack.start_sim(port + 1)
            stack.manage("seed_demo")
            web = stack.spawn_web(port)
            for number in range(workers):
                name = f"worker-{number + 1}"
                stack.spawn_kept(name, "worker", "--name", f"{name}-{os.getpid()}")
            stack.spawn_kept("notices", "worker", "--queues", "notices")
            stack.spawn_kept("sweeper", "sweeper")
            try:
                wait_until_answers(f"http://127.0.0.1:{port}/healthz", web)
            except RuntimeError as error:
                raise CommandError(str(error)) from None
            database = settings.DATABASES["default"]
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nagentops is running at http://127.0.0.1:{port}/\n"
                    f"  logins:   admin / admin (see the README for the other demo users)\n"
                    f"  database: PostgreSQL {database['NAME']} at {database['HOST']}"
                    f"{' (embedded)' if 'DATABASE_URL' not in os.environ else ''}\n"
                    f"  redis:    {settings.REDIS_URL}"
                    f"{' (embedded)' if 'REDIS_URL' not in os.environ else ''}\n"
                    f"  sim:      {sim}\n"
                    f"  {workers} workers, a notices' worker and the sweeper are running. "
                    "Ctrl-C stops everything.\n"
                )
            )
            self._wait(stack)
        finally:
            stack.stop()
            started = embedded.started_here(settings.DATA_DIR / "embedded")
            if started:
                from django.db import connections

                connections.close_all()
                embedded.stop(
                    settings.DATA_DIR / "embedded",
                    postgres="postgres" in started,
                    redis="redis" in started,
                )
            if stack.children:
                self.stdout.write("stopped")

    def _wait(self, stack: Stack) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while not stopping:
            try:
                for line in stack.restart_exited():
                    self.stdout.write(line)
            except RuntimeError as error:
                raise CommandError(f"{error}; stopped everything") from None
            if stack.any_exited():
                raise CommandError("the web or the simulated services exited; stopped everything")
            time.sleep(0.5)
