"""`manage.py bench throughput`: steps per second that N real worker processes sustain, and
where their time goes.

Creates `tasks` tasks of the no-op bench agent (one model call and one in-process tool call per
step), starts `workers` burst workers (`manage.py worker --burst`) against the same PostgreSQL
and Redis, and measures from the first task's start to the last task's finish as the database
recorded them (so worker start-up is left out). This is the engine's ceiling on this machine:
real agents spend most of their time waiting on models and tools, and a worker waiting holds no
database connection busy.

While the workers run, a sampler reads every `SAMPLE_SECONDS` what the database's backends of
this database are doing (`pg_stat_activity`: running, waiting on a lock, on I/O, or idle waiting
for the worker) and their CPU time (`/proc/<pid>/stat`: the server runs here), and the run
reports the workers' own CPU (their rusage), the backends' CPU and Redis's (`INFO cpu`, the whole
server: other databases included), each per step and as a share of the run's wall time, next to
the cores the machine has and its load average. `throughputs` runs several worker counts in turn
(repeated, alternating), so each scaling ratio compares runs made side by side.

A run takes one route to the database (`Route`): `direct`; `pooled`, through a connection pooler
in transaction pooling (the operator's PgBouncer, named by its URL; the workers run with
AGENTOPS_DB_POOL_MODE=transaction); or `hosts`, the workers spread over two hosts of their own
(agentops.dev.hosts: network namespaces reaching PostgreSQL and Redis over a link).
`routes_compared` runs each route in turn, alternating, and each one's ratio to the first.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from django.db.models import Max, Min
from rq.worker import Worker

from agentops.dev.benchmarks.tasks import bench_tasks_delete
from agentops.dev.hosts import Host, hosts_create
from agentops.engine import task_create
from agentops.models import Task
from agentops.plumbing import queues
from agentops.plumbing.dburl import database_url
from agentops.states import TaskStatus

AGENT = "bench_noop"
SAMPLE_SECONDS = 0.05
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a local process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class BackendSampler(threading.Thread):
    """Samples the backends of this database (other than its own connection): their wait
    states, and the CPU each has used (the last value seen per pid, so a backend that exits
    between two samples loses at most one interval)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.states: Counter[str] = Counter()
        self.cpu_first: dict[int, float] = {}
        self.cpu_last: dict[int, float] = {}
        self.url = database_url(connection.settings_dict)
        self.database = connection.settings_dict["NAME"]

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT pid, state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = "
                    "'client backend'",
                    [self.database],
                ).fetchall()
                for pid, state, wait_type, wait_event in rows:
                    self.states[_state_label(state, wait_type, wait_event)] += 1
                    cpu = _proc_cpu_seconds(pid)
                    if cpu is not None:
                        self.cpu_first.setdefault(pid, cpu)
                        self.cpu_last[pid] = cpu
                time.sleep(SAMPLE_SECONDS)

    def backend_cpu_seconds(self) -> float:
        return sum(self.cpu_last[pid] - self.cpu_first[pid] for pid in self.cpu_last)


def _state_label(state: str | None, wait_type: str | None, wait_event: str | None) -> str:
    if state == "active":
        return "running" if wait_type is None else f"waiting: {wait_type}/{wait_event}"
    if state and state.startswith("idle in transaction"):
        return "idle in transaction (waiting for the worker)"
    return "idle (waiting for the worker)"


def _redis_cpu_seconds() -> float:
    info = queues.redis_client().info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@dataclass
class Route:
    """How the workers reach the database: `name`, the `DATABASE_URL` they are given (None: this
    process's), more environment, and the hosts they are spread over (none: this one)."""

    name: str
    database_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    hosts: list[Host] = field(default_factory=list)

    def command(self, index: int, *argv: str) -> tuple[list[str], dict[str, str]]:
        """The `index`th worker's command line and environment on this route."""
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url or database_url(connection.settings_dict),
            "REDIS_URL": settings.RQ_QUEUES["default"]["URL"],
            **self.env,
        }
        if not self.hosts:
            return list(argv), env
        host = self.hosts[index % len(self.hosts)]
        return host.command(*argv), host.environment(env)


DIRECT = Route("direct")
ROUTES = ("direct", "pooled", "hosts")


@contextmanager
def routes_made(names: list[str], pooler_url: str | None) -> Iterator[list[Route]]:
    """The routes `names`; `hosts` makes two hosts for the length of the block."""
    made: list[Route] = []
    hosts: list[Host] = []
    try:
        for name in names:
            if name == "direct":
                made.append(DIRECT)
            elif name == "pooled":
                if not pooler_url:
                    raise ValueError("the pooled route needs the pooler's URL")
                made.append(Route(name, pooler_url, {"AGENTOPS_DB_POOL_MODE": "transaction"}))
            else:
                hosts = hosts or hosts_create(["bench-a", "bench-b"])
                made.append(Route(name, hosts=hosts))
        yield made
    finally:
        for host in hosts:
            host.remove()


def throughput(
    *, workers: int, tasks: int, steps: int, payload_kb: int, route: Route = DIRECT
) -> dict[str, Any]:
    queue = queues.queue()
    if queue.count or Worker.count(queue=queue):
        return {"benchmark": "throughput", "note": "skipped: the queue has jobs or a worker"}
    created = [
        task_create(
            agent=AGENT,
            goal="bench throughput",
            input={"steps": steps, "payload_kb": payload_kb},
        ).pk
        for _ in range(tasks)
    ]
    sampler = BackendSampler()
    try:
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        commands = [
            route.command(index, sys.executable, manage, "worker", "--burst")
            for index in range(workers)
        ]
        children_cpu = _children_cpu_seconds()
        redis_cpu = _redis_cpu_seconds()
        sampler.start()
        began = time.perf_counter()
        children = [subprocess.Popen(command, env=env) for command, env in commands]
        for child in children:
            child.wait(timeout=3600)
        wall = time.perf_counter() - began
        sampler.stop.set()
        sampler.join(timeout=10)
        workers_cpu = _children_cpu_seconds() - children_cpu
        redis_cpu = _redis_cpu_seconds() - redis_cpu
        done = Task.objects.filter(pk__in=created)
        succeeded = done.filter(status=TaskStatus.SUCCEEDED).count()
        span = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
        seconds = (span["last"] - span["first"]).total_seconds()
    finally:
        sampler.stop.set()
        bench_tasks_delete(created)
    total_steps = succeeded * steps
    samples = sum(sampler.states.values()) or 1
    backend_cpu = sampler.backend_cpu_seconds()
    return {
        "benchmark": "throughput",
        "route": route.name,
        "workers": workers,
        "tasks": tasks,
        "tasks_succeeded": succeeded,
        "steps_per_task": steps,
        "payload_kb": payload_kb,
        "seconds": round(seconds, 3),
        "steps_per_second": round(total_steps / seconds, 1) if seconds else None,
        "where_the_time_goes": {
            "wall_seconds_with_startup": round(wall, 3),
            "workers_cpu_ms_per_step": _per_step(workers_cpu, total_steps),
            "postgres_cpu_ms_per_step": _per_step(backend_cpu, total_steps),
            "redis_cpu_ms_per_step (whole server)": _per_step(redis_cpu, total_steps),
            "cpu_seconds_per_wall_second": round((workers_cpu + backend_cpu) / wall, 2),
            "cores": os.cpu_count(),
            "load_average_1m_after": round(os.getloadavg()[0], 1),
            "backend_states_share": {
                label: round(count / samples, 3) for label, count in sampler.states.most_common()
            },
        },
    }


def _per_step(seconds: float, steps: int) -> float | None:
    return round(seconds * 1000 / steps, 3) if steps else None


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def throughputs(
    *, workers: list[int], tasks: int, steps: int, payload_kb: int, rounds: int
) -> dict[str, Any]:
    """`throughput` for each worker count in turn, `rounds` times (alternating, so drift on a
    shared machine hits every count), and each count's speed-up over the first: the median of
    the per-round ratios."""
    runs: dict[int, list[dict[str, Any]]] = {count: [] for count in workers}
    for _ in range(rounds):
        for count in workers:
            runs[count].append(
                throughput(workers=count, tasks=tasks, steps=steps, payload_kb=payload_kb)
            )
    base = workers[0]
    scaling = {}
    for count in workers:
        ratios = [
            run["steps_per_second"] / first["steps_per_second"]
            for run, first in zip(runs[count], runs[base], strict=True)
            if run.get("steps_per_second") and first.get("steps_per_second")
        ]
        scaling[str(count)] = round(statistics.median(ratios), 2) if ratios else None
    return {
        "benchmark": "throughput",
        "workers": workers,
        "rounds": rounds,
        f"speedup_over_{base}": scaling,
        "runs": {str(count): runs[count] for count in workers},
    }


def routes_compared(
    *, routes: list[Route], workers: int, tasks: int, steps: int, payload_kb: int, rounds: int
) -> dict[str, Any]:
    """`throughput` on each route in turn, `rounds` times (alternating), and each route's steps
    per second over the first's: the median of the per-round ratios."""
    runs: dict[str, list[dict[str, Any]]] = {route.name: [] for route in routes}
    for _ in range(rounds):
        for route in routes:
            runs[route.name].append(
                throughput(
                    workers=workers, tasks=tasks, steps=steps, payload_kb=payload_kb, route=route
                )
            )
    base = routes[0].name
    ratios = {}
    for name, measured in runs.items():
        each = [
            run["steps_per_second"] / first["steps_per_second"]
            for run, first in zip(measured, runs[base], strict=True)
            if run.get("steps_per_second") and first.get("steps_per_second")
        ]
        ratios[name] = round(statistics.median(each), 3) if each else None
    return {
        "benchmark": "throughput",
        "workers": workers,
        "rounds": rounds,
        "steps_per_second": {
            name: [run.get("steps_per_second") for run in measured]
            for name, measured in runs.items()
        },
        f"ratio_to_{base}": ratios,
        "runs": runs,
    }
