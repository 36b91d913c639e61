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

With `model_seconds` the scripted model takes that long to answer, as a real model does, and each
worker advances `tasks_per_worker` tasks at once (`worker --tasks`): then the run also reports the
tasks in flight (held by a worker, sampled every IN_FLIGHT_SAMPLE_SECONDS: all but a few
milliseconds of each held task's step is its model call), the steps per second that many calls
of that length allow and the share of it reached, and the workers' memory (proportional set
size, /proc/<pid>/smaps_rollup, at its highest sample) per task in flight.
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
IN_FLIGHT_SAMPLE_SECONDS = 0.5
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


def pss_kb(pid: int) -> int | None:
    """The process's proportional set size in KB (None when it is gone)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


class InFlightSampler(threading.Thread):
    """Samples how many of `task_ids` a worker holds (running, lease unexpired), and the summed
    proportional set size of the processes `pids` (given once they run)."""

    def __init__(self, task_ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.task_ids = task_ids
        self.pids: list[int] = []
        self.held: list[int] = []
        self.pss_kb: list[int] = []
        self.url = database_url(connection.settings_dict)

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.wait(IN_FLIGHT_SAMPLE_SECONDS):
                row = conn.execute(
                    "SELECT count(*) FROM agentops_task WHERE id = ANY(%s) AND status = %s "
                    "AND lease_expires_at > now()",
                    [self.task_ids, TaskStatus.RUNNING],
                ).fetchone()
                self.held.append(row[0] if row else 0)
                sizes = [pss_kb(pid) for pid in self.pids]
                if sizes and None not in sizes:
                    self.pss_kb.append(sum(size or 0 for size in sizes))

    def report(
        self, *, model_seconds: float, slots: int, steps_per_second: float | None
    ) -> dict[str, Any]:
        busy = [held for held in self.held if held] or [0]
        in_flight = statistics.median(busy)
        allowed = slots / model_seconds
        pss_mb = max(self.pss_kb) / 1024 if self.pss_kb else None
        return {
            "model_seconds": model_seconds,
            "tasks_in_flight_median": in_flight,
            "tasks_in_flight_max": max(busy),
            "steps_per_second_allowed": round(allowed, 1),
            "share_of_allowed": round(steps_per_second / allowed, 3) if steps_per_second else None,
            "workers_pss_mb": round(pss_mb, 1) if pss_mb is not None else None,
            "pss_mb_per_task_in_flight": (
                round(pss_mb / in_flight, 2) if pss_mb is not None and in_flight else None
            ),
        }


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
    *,
    workers: int,
    tasks: int,
    steps: int,
    payload_kb: int,
    route: Route = DIRECT,
    tasks_per_worker: int = 1,
    model_seconds: float = 0.0,
) -> dict[str, Any]:
    queue = queues.queue()
    if queue.count or Worker.count(queue=queue):
        return {"benchmark": "throughput", "note": "skipped: the queue has jobs or a worker"}
    created = [
        task_create(
            agent=AGENT,
            goal="bench throughput",
            input={"steps": steps, "payload_kb": payload_kb, "model_seconds": model_seconds},
        ).pk
        for _ in range(tasks)
    ]
    sampler = BackendSampler()
    in_flight = InFlightSampler(created)
    try:
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        commands = [
            route.command(
                index, sys.executable, manage, "worker", "--burst", f"--tasks={tasks_per_worker}"
            )
            for index in range(workers)
        ]
        children_cpu = _children_cpu_seconds()
        redis_cpu = _redis_cpu_seconds()
        sampler.start()
        in_flight.start()
        began = time.perf_counter()
        children = [subprocess.Popen(command, env=env) for command, env in commands]
        if not route.hosts:  # on a host, the child is the namespace's wrapper, not the worker
            in_flight.pids = [child.pid for child in children]
        for child in children:
            child.wait(timeout=3600)
        wall = time.perf_counter() - began
        sampler.stop.set()
        in_flight.stop.set()
        sampler.join(timeout=10)
        in_flight.join(timeout=10)
        workers_cpu = _children_cpu_seconds() - children_cpu
        redis_cpu = _redis_cpu_seconds() - redis_cpu
        done = Task.objects.filter(pk__in=created)
        succeeded = done.filter(status=TaskStatus.SUCCEEDED).count()
        span = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
        seconds = (span["last"] - span["first"]).total_seconds()
    finally:
        sampler.stop.set()
        in_flight.stop.set()
        bench_tasks_delete(created)
    total_steps = succeeded * steps
    samples = sum(sampler.states.values()) or 1
    backend_cpu = sampler.backend_cpu_seconds()
    steps_per_second = round(total_steps / seconds, 1) if seconds else None
    slow_model = (
        in_flight.report(
            model_seconds=model_seconds,
            slots=min(tasks, workers * tasks_per_worker),
            steps_per_second=steps_per_second,
        )
        if model_seconds
        else {}
    )
    return {
        "benchmark": "throughput",
        "route": route.name,
        "workers": workers,
        "tasks_per_worker": tasks_per_worker,
        "tasks": tasks,
        "tasks_succeeded": succeeded,
        "steps_per_task": steps,
        "payload_kb": payload_kb,
        "seconds": round(seconds, 3),
        "steps_per_second": steps_per_second,
        **slow_model,
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


def throughputs(*, workers: list[int], rounds: int, **run: Any) -> dict[str, Any]:
    """`throughput` for each worker count in turn, `rounds` times (alternating, so drift on a
    shared machine hits every count), and each count's speed-up over the first: the median of
    the per-round ratios."""
    runs: dict[int, list[dict[str, Any]]] = {count: [] for count in workers}
    for _ in range(rounds):
        for count in workers:
            runs[count].append(throughput(workers=count, **run))
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


def routes_compared(*, routes: list[Route], rounds: int, **run: Any) -> dict[str, Any]:
    """`throughput` on each route in turn, `rounds` times (alternating), and each route's steps
    per second over the first's: the median of the per-round ratios."""
    runs: dict[str, list[dict[str, Any]]] = {route.name: [] for route in routes}
    for _ in range(rounds):
        for route in routes:
            runs[route.name].append(throughput(route=route, **run))
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
        "workers": run["workers"],
        "rounds": rounds,
        "steps_per_second": {
            name: [run.get("steps_per_second") for run in measured]
            for name, measured in runs.items()
        },
        f"ratio_to_{base}": ratios,
        "runs": runs,
    }
