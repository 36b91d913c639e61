"""`make run` (manage.py runstack) as a newcomer meets it: the banner only once the site answers,
one clear line and a non-zero exit when its port is taken, a worker that dies started again,
Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from agentops.dev.devstack import Stack, port_taken
from tests.conftest import database_url, free_port, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def runstack(port: int, *, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.RQ_QUEUES["default"]["URL"],
        "AGENTOPS_DEV": "1",
    }
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "runstack",
            *("--port", str(port)),
            *("--workers", "1"),
        ],
        cwd=ROOT,
        env=env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def pids_running(argument: str) -> list[int]:
    """The processes whose command line has `argument`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if argument.encode() in arguments:
            found.append(int(entry.name))
    return found


def free_port_and_the_next() -> int:
    """A free port whose next one is free too: runstack takes both (the web and the simulated
    services), and a port the system handed out may be followed by one in use."""
    for _ in range(100):
        port = free_port()
        if not port_taken(port + 1):  # runstack's own check
            return port
    raise AssertionError("no two free ports in a row")


def test_runstack_refuses_a_taken_port_with_one_line_and_a_non_zero_exit(tmp_path, redis_clean):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        child = runstack(port, log=tmp_path / "run.log")
        assert child.wait(timeout=120) == 1

    lines = (tmp_path / "run.log").read_text().strip().splitlines()
    assert lines == [
        f"CommandError: port {port} is in use (the web takes {port}, the simulated services "
        f"{port + 1}): stop what runs there, or choose others with make run PORT=N"
    ]


def test_runstack_prints_its_banner_restarts_a_dead_worker_and_stops_on_ctrl_c(
    tmp_path, redis_clean
):
    port = free_port_and_the_next()
    log = tmp_path / "run.log"
    child = runstack(port, log=log)

    def banner() -> bool:
        text = log.read_text()
        assert child.poll() is None, f"runstack exited ({child.returncode}): {text[-2000:]}"
        return "agentops is running" in text

    try:
        wait_for(banner, timeout=180, message="banner")
        # The banner came after the site answered: it answers now, at once.
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/login/", timeout=10).status_code == 200
        # A worker that dies is started again; the rest runs on.
        (worker,) = pids_running(f"worker-1-{child.pid}")
        os.kill(worker, signal.SIGKILL)
        again = "worker-1 exited (-9); started again as pid "
        wait_for(lambda: again in log.read_text(), timeout=60, message="the worker to restart")
        (restarted,) = pids_running(f"worker-1-{child.pid}")
        assert restarted != worker and f"{again}{restarted}" in log.read_text()
        assert child.poll() is None
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        os.killpg(child.pid, signal.SIGINT)
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert log.read_text().rstrip().endswith("stopped")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)
        except httpx.TransportError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the web process still answers after Ctrl-C")


def test_a_kept_child_that_keeps_exiting_is_given_up_after_five_restarts_in_a_minute():
    stack = Stack(quiet=True)
    stack.spawn_kept("broken", "no_such_command")
    said: list[str] = []
    try:
        with pytest.raises(RuntimeError, match="broken exited 6 times within a minute"):
            deadline = time.monotonic() + 300  # against a hang only
            while time.monotonic() < deadline:
                said += stack.restart_exited()
                time.sleep(0.05)
    finally:
        stack.stop()

    assert len(said) == 5
    assert all(line.startswith("broken exited (1); started again as pid ") for line in said)
