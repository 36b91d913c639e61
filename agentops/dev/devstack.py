"""Local process supervision for `runstack` (make run) and `demo_scenario`.

Starts the product's processes as children (web, simulated services, workers, sweeper) and stops
them all together. The children find the same PostgreSQL and Redis as this process: the URLs in
the environment, or the embedded servers the settings started. Production runs these processes
under its own supervisor instead (see the Procfile).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import IO

import httpx
from django.conf import settings

MANAGE = str(Path(settings.BASE_DIR) / "manage.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_taken(port: int) -> bool:
    """Whether something listens on (or holds) 127.0.0.1:`port` already."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def wait_until_answers(url: str, child: subprocess.Popen[bytes], *, seconds: float = 60) -> None:
    """Wait until `url` answers 200, while `child` (the process serving it) runs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"{url} did not come up: its process exited ({child.returncode})")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {seconds:g} s")


# A kept child that exits this many times within a minute is failing, not crashing now and then.
RESTARTS_PER_MINUTE = 5


class Stack:
    """A set of child processes sharing one environment; `stop()` ends every one of them."""

    def __init__(self, *, env: dict[str, str] | None = None, quiet: bool = False) -> None:
        self.env = dict(os.environ if env is None else env)
        self.quiet = quiet
        self.children: list[subprocess.Popen[bytes]] = []
        # Children started again when they exit (workers, the sweeper): name -> its command,
        # its process, and when it was last started again.
        self.kept: dict[str, tuple[tuple[str, ...], subprocess.Popen[bytes], deque[float]]] = {}

    def manage(self, *args: str) -> None:
        """Run a management command to completion in the stack's environment."""
        subprocess.run(
            [sys.executable, MANAGE, *args], env=self.env, check=True, stdout=self._output()
        )

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start `manage.py <args>` as a child."""
        return self.spawn_program(sys.executable, MANAGE, *args, env=env)

    def spawn_web(self, port: int) -> subprocess.Popen[bytes]:
        """The web process as production runs it: gunicorn with the project's config."""
        return self.spawn_program(
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "python:agentops.gunicorn_conf",
            "agentops.wsgi",
            env={"GUNICORN_BIND": f"127.0.0.1:{port}"},
        )

    def spawn_program(
        self, *command: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            list(command),
            cwd=settings.BASE_DIR,
            env={**self.env, **(env or {})},
            stdout=self._output(),
            stderr=self._output(),
            start_new_session=True,
        )
        self.children.append(child)
        return child

    def start_sim(self, port: int) -> str:
        """Start the simulated services on `port` and wait until they answer; return the URL."""
        base = f"http://127.0.0.1:{port}/sim"
        self.spawn(
            "runserver",
            f"127.0.0.1:{port}",
            "--noreload",
            "--skip-checks",
            env={"DJANGO_SETTINGS_MODULE": "agentops.dev.sim_settings"},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.post(f"{base}/orders/lookup", json={"order_id": "A1"}, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"the simulated services did not start on port {port}")
        self.env["AGENTOPS_SIM_BASE_URL"] = base
        return base

    def spawn_kept(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start `manage.py <args>` as a child that `restart_exited` starts again if it exits."""
        child = self.spawn(*args)
        self.kept[name] = (args, child, deque(maxlen=RESTARTS_PER_MINUTE))
        return child

    def restart_exited(self) -> list[str]:
        """Start again every kept child that exited, and say so. A child that exits again and
        again (RESTARTS_PER_MINUTE times within a minute) is not started again: it raises."""
        said = []
        for name, (args, child, restarts) in list(self.kept.items()):
            if child.poll() is None:
                continue
            now = time.monotonic()
            if len(restarts) == restarts.maxlen and now - restarts[0] < 60:
                raise RuntimeError(
                    f"{name} exited {restarts.maxlen + 1} times within a minute (last exit "
                    f"{child.returncode}); not started again"
                )
            restarts.append(now)
            self.children.remove(child)
            again = self.spawn(*args)
            self.kept[name] = (args, again, restarts)
            said.append(f"{name} exited ({child.returncode}); started again as pid {again.pid}")
        return said

    def any_exited(self) -> bool:
        return any(child.poll() is not None for child in self.children)

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()

    def _output(self) -> int | IO[bytes] | None:
        return subprocess.DEVNULL if self.quiet else None
