"""`manage.py bench memory`: whether a real worker's memory stays flat over many steps.

Creates tasks of the no-op bench agent (one model call and one in-process tool call per step,
each carrying `payload_kb` KB) holding `steps` steps in all, on the configured database, then
starts one real worker (`manage.py worker`, not burst) against the same PostgreSQL and Redis,
with the production time slice and DEBUG off. The worker's resident set (VmRSS in
/proc/<pid>/status) is read once a tenth of the tasks are done (warm-up: imports, connections
and the heap's working set for one task are in place by then) and again once every task is; the
ratio of the two is what a worker that runs for days would drift by. A worker keeping something
per step it finished (across tasks) shows here as `growth_kb_per_step`.

The worker is stopped (SIGTERM, RQ's warm shutdown) and the tasks, their rows and artifact files
deleted. Linux only (it reads /proc). Performance belongs here, printed as figures; tests only
check that the command runs and what it reports.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Count, Q
from rq.worker import Worker

from agentops.agents.bench import MAX_STEPS
from agentops.dev.benchmarks.tasks import bench_tasks_delete
from agentops.engine import task_create
from agentops.models import Step, Task
from agentops.plumbing import queues
from agentops.plumbing.dburl import database_url
from agentops.states import CLAIMABLE, StepStatus, TaskStatus

AGENT = "bench_noop"
# Steps per task unless --tasks says otherwise: a typical agent task (DESIGN §1: 20+ calls).
STEPS_PER_TASK = 20
# The share of the tasks that runs before the first reading.
WARM_UP_SHARE = 0.1
POLL_SECONDS = 0.2
# The run fails when no step completes for this long (a worker stuck or gone).
STALL_SECONDS = 120.0
STOP_SECONDS = 30.0


def rss_kb(pid: int) -> int:
    """The process's resident set (VmRSS) in KB, from /proc/<pid>/status."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError as exc:
        raise CommandError(f"cannot read the worker's memory ({exc}): Linux /proc needed") from None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise CommandError(f"no VmRSS in /proc/{pid}/status (the worker has exited?)")


def task_sizes(*, steps: int, tasks: int | None) -> list[int]:
    """`steps` split into `tasks` tasks as evenly as possible (default: tasks of STEPS_PER_TASK
    steps). CommandError when a task would exceed the bench agent's plan cap or have no step."""
    count = math.ceil(steps / STEPS_PER_TASK) if tasks is None else tasks
    if count < 1 or count > steps:
        raise CommandError(f"{steps} steps cannot be split into {count} tasks")
    base, extra = divmod(steps, count)
    sizes = [base + 1] * extra + [base] * (count - extra)
    if sizes[0] > MAX_STEPS:
        raise CommandError(
            f"{steps} steps in {count} tasks is more than {MAX_STEPS} steps per task "
            "(the bench agent's cap): ask for more --tasks"
        )
    return sizes


def memory(*, steps: int, payload_kb: int, tasks: int | None = None) -> dict[str, Any]:
    """Run the memory benchmark; CommandError when the queue is busy, the worker dies or
    stalls, or a task does not succeed."""
    sizes = task_sizes(steps=steps, tasks=tasks)
    queue = queues.queue()
    if queue.count or Worker.count(queue=queue):
        raise CommandError("the queue has jobs or a worker: the benchmark needs it to itself")
    created: list[int] = []
    try:
        created.extend(
            task_create(
                agent=AGENT, goal="bench memory", input={"steps": size, "payload_kb": payload_kb}
            ).pk
            for size in sizes
        )
        with tempfile.TemporaryFile(mode="w+") as errors:
            readings = _run_worker(created, steps=steps, errors=errors)
        succeeded = Task.objects.filter(pk__in=created, status=TaskStatus.SUCCEEDED).count()
    finally:
        bench_tasks_delete(created)
    if succeeded != len(created):
        raise CommandError(f"only {succeeded} of {len(created)} bench tasks succeeded")
    return _report(readings, steps=steps, tasks=len(sizes), payload_kb=payload_kb)


def _worker_environment() -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": settings.RQ_QUEUES["default"]["URL"],
        # As in production: DEBUG off (with it every query would log itself and be kept).
        "DJANGO_DEBUG": "0",
        "AGENTOPS_SLICE_SECONDS": str(settings.AGENTOPS["SLICE_SECONDS"]),
    }


def _run_worker(created: list[int], *, steps: int, errors: IO[str]) -> dict[str, Any]:
    """Start the worker, read its memory after the warm-up and at the end, stop it."""
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    worker = subprocess.Popen(
        [sys.executable, manage, "worker"],
        env=_worker_environment(),
        stdout=subprocess.DEVNULL,
        stderr=errors,
    )
    try:
        warm_up = max(1, math.ceil(len(created) * WARM_UP_SHARE))
        progress = _Progress(created)
        progress.wait(worker, errors, until=lambda: progress.finished >= warm_up)
        first = rss_kb(worker.pid)
        first_at, first_steps = time.monotonic(), progress.steps
        progress.wait(worker, errors, until=lambda: progress.active == 0)
        last = rss_kb(worker.pid)
        seconds = time.monotonic() - first_at
        return {
            "warm_up_tasks": warm_up,
            "warm_up_steps": first_steps,
            "rss_first_kb": first,
            "rss_last_kb": last,
            "rss_max_kb": max(first, last, progress.rss_max),
            "measured_steps": progress.steps - first_steps,
            "seconds": seconds,
        }
    finally:
        _stop(worker)


class _Progress:
    """The bench tasks' progress as the database records it, read every POLL_SECONDS, with the
    worker's resident set read at each poll."""

    def __init__(self, created: list[int]) -> None:
        self.created = created
        self.steps = 0
        self.finished = 0
        self.active = len(created)
        self.rss_max = 0

    def poll(self) -> None:
        counts = Task.objects.filter(pk__in=self.created).aggregate(
            active=Count("pk", filter=Q(status__in=CLAIMABLE)),
            finished=Count("pk", filter=~Q(status__in=CLAIMABLE)),
        )
        self.active, self.finished = counts["active"], counts["finished"]
        self.steps = Step.objects.filter(
            task_id__in=self.created, status=StepStatus.SUCCEEDED
        ).count()

    def wait(self, worker: subprocess.Popen[bytes], errors: IO[str], *, until: Any) -> None:
        """Poll until `until()`; CommandError when the worker exits or no step completes for
        STALL_SECONDS."""
        moved_at, seen = time.monotonic(), -1
        while True:
            self.poll()
            if until():
                return
            if worker.poll() is not None:
                errors.seek(0)
                raise CommandError(
                    f"the worker exited (status {worker.returncode}):\n{errors.read()[-3000:]}"
                )
            self.rss_max = max(self.rss_max, rss_kb(worker.pid))
            if self.steps != seen:
                moved_at, seen = time.monotonic(), self.steps
            elif time.monotonic() - moved_at > STALL_SECONDS:
                raise CommandError(
                    f"no step completed in {STALL_SECONDS:.0f} s: the worker stalled"
                )
            time.sleep(POLL_SECONDS)


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """RQ's warm shutdown (it finishes the job in hand and unregisters), else a kill."""
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def _report(readings: dict[str, Any], *, steps: int, tasks: int, payload_kb: int) -> dict[str, Any]:
    first, last = readings["rss_first_kb"], readings["rss_last_kb"]
    measured = readings["measured_steps"]
    return {
        "benchmark": "memory",
        "steps": steps,
        "tasks": tasks,
        "payload_kb": payload_kb,
        "warm_up_tasks": readings["warm_up_tasks"],
        "warm_up_steps": readings["warm_up_steps"],
        "measured_steps": measured,
        "rss_first_mb": round(first / 1024, 1),
        "rss_last_mb": round(last / 1024, 1),
        "rss_max_mb": round(readings["rss_max_kb"] / 1024, 1),
        "rss_growth_ratio": round(last / first, 3),
        "growth_kb_per_step": round((last - first) / measured, 2) if measured else None,
        "steps_per_second": round(measured / readings["seconds"], 1)
        if readings["seconds"]
        else None,
    }


def memory_table(report: dict[str, Any]) -> str:
    keys = [k for k in report if k != "benchmark"]
    return "\n".join(["memory bench: one real worker", *(f"  {k:<20} {report[k]}" for k in keys)])
