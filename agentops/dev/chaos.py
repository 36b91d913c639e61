"""`manage.py chaos`: the demo agents under continuous faults, then the invariants checked.

For `minutes`, real worker processes advance refund and trip tasks (a new task starts whenever one
settles, so `tasks` are always in flight) against the simulated services, while a fault loop
SIGKILLs workers at random moments (inside and between calls), freezes one past its lease and
resumes it, flushes Redis once, makes the model answer 429 or time out, and makes the services
time out after the effect, answer 5xx, answer another request's response (out of order) or receive
a request twice. Then the faults stop, the system settles, and the database and the simulated
services are checked: no effect twice per idempotency key, no logical effect twice under
different keys (a step's effect on one service), no task lost (each is terminal or waits for a
human with a reason), no step completed twice, gapless event numbers, and how many model calls
each completed step cost. The report lists the figures; any broken invariant makes it fail.

With `hosts` (two or more), the workers and a sweeper per host run on hosts of their own
(agentops.dev.hosts: network namespaces, each with its own hostname and pid space, reaching
PostgreSQL, Redis and the services over a link), artifacts go to PostgreSQL
(AGENTOPS_ARTIFACT_STORAGE=postgres) above a 256-byte threshold so that most step outputs are
artifacts, each host has a MEDIA_ROOT of its own, and the report says per host how many claims
and which process identities it saw, and how many tasks moved between hosts.

It works on the configured database and touches only the tasks it creates.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max

from agentops.dev.devstack import MANAGE, Stack, free_port
from agentops.dev.hosts import Host, hosts_create
from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_reset, fault_set
from agentops.dev.sim.world import order
from agentops.engine import task_create
from agentops.models import Artifact, Event, Step, Task
from agentops.plumbing import queues
from agentops.plumbing.dburl import database_url
from agentops.states import TERMINAL, StepStatus, TaskStatus

GOAL_PREFIX = "chaos:"
LEASE_SECONDS = 3.0
# Keyed write endpoints: duplicated deliveries are harmless only where the remote honours keys.
KEYED_WRITES = ["payments.refund", "email.send", "flights.book", "hotels.book"]
SERVICE_FAULTS = ["execute_then_timeout", "execute_then_5xx", "out_of_order", "duplicate", "429"]
MODEL_FAULTS = ["429", "timeout", "5xx"]
WAITING = {TaskStatus.AWAITING_APPROVAL, TaskStatus.NEEDS_ATTENTION, TaskStatus.PAUSED}
# On several hosts: most step outputs and tool results become artifacts.
HOSTS_ARTIFACT_THRESHOLD_BYTES = 256


@dataclass
class ChaosRun:
    minutes: float
    workers: int
    tasks: int
    seed: int
    hosts: int = 1
    kill_every: float = 4.0
    # Tasks each worker advances at once, and how long each model call takes.
    tasks_per_worker: int = 1
    model_seconds: float = 0.0
    settle_seconds: float = 180.0
    rng: random.Random = field(init=False)
    kills: int = 0
    freezes: int = 0
    redis_flushes: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    held_at_kills: list[int] = field(default_factory=list)  # tasks the killed worker held
    task_ids: list[int] = field(default_factory=list)
    machines: list[Host] = field(default_factory=list)
    placed: dict[int, Host] = field(default_factory=dict)  # a child's pid: its host
    media: Path = field(init=False)  # the hosts' MEDIA_ROOTs, one folder each

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- running --------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        calls = Path(tempfile.mkstemp(prefix="agentops-chaos-calls-", suffix=".jsonl")[1])
        stack = Stack(quiet=True)
        stack.env.update(
            # The children work on exactly this process's database and queue.
            DATABASE_URL=database_url(connection.settings_dict),
            REDIS_URL=settings.RQ_QUEUES["default"]["URL"],
            AGENTOPS_LEASE_SECONDS=str(LEASE_SECONDS),
            AGENTOPS_SLICE_SECONDS="1",
            AGENTOPS_SWEEP_INTERVAL_SECONDS="0.5",
            AGENTOPS_SWEEP_GRACE_SECONDS="1",
            AGENTOPS_BACKOFF_BASE_SECONDS="0.2",
            AGENTOPS_BACKOFF_MAX_SECONDS="2",
            AGENTOPS_TOOL_TIMEOUT_SECONDS="1.5",
            AGENTOPS_MODEL_CALL_LOG=str(calls),
            # A frozen worker's open transaction is cut off well before the run ends.
            AGENTOPS_DB_IDLE_IN_TRANSACTION_TIMEOUT="3s",
        )
        workers: list[subprocess.Popen[bytes]] = []
        started = time.monotonic()
        try:
            stack.start_sim(free_port())
            if self.hosts > 1:
                self.media = Path(tempfile.mkdtemp(prefix="agentops-chaos-media-"))
                self.machines = hosts_create([f"host-{chr(97 + i)}" for i in range(self.hosts)])
            workers = [self._spawn_worker(stack) for _ in range(self.workers)]
            sweeper_hosts: list[Host | None] = [*self.machines] or [None]  # a sweeper each
            for machine in sweeper_hosts:
                self._spawn(stack, "sweeper", machine)
            flush_at = started + self.minutes * 30  # halfway
            next_kill = started + self.rng.expovariate(1 / self.kill_every)
            while time.monotonic() - started < self.minutes * 60:
                self._top_up()
                if time.monotonic() >= next_kill:
                    workers = self._kill(stack, workers)
                    next_kill = time.monotonic() + self.rng.expovariate(1 / self.kill_every)
                workers = self._fault(stack, workers)
                if self.redis_flushes == 0 and time.monotonic() >= flush_at:
                    queues.redis_client().flushdb()
                    self.redis_flushes += 1
                time.sleep(self.rng.uniform(0.2, min(1.0, self.kill_every)))
            fault_reset()
            for child in workers:
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGCONT)  # nobody stays frozen
            settled = self._settle()
        finally:
            stack.stop()
            for machine in self.machines:
                machine.remove()
            if self.machines:
                shutil.rmtree(self.media, ignore_errors=True)
            fault_reset()
        report = self._report(calls, settled=settled, seconds=time.monotonic() - started)
        calls.unlink(missing_ok=True)
        return report

    def _spawn_worker(self, stack: Stack) -> subprocess.Popen[bytes]:
        return self._spawn(stack, "worker", args=(f"--tasks={self.tasks_per_worker}",))

    def _spawn(
        self,
        stack: Stack,
        command: str,
        machine: Host | None = None,
        *,
        args: tuple[str, ...] = (),
    ) -> subprocess.Popen[bytes]:
        """`manage.py <command>` here, or on `machine` (by default the host with the fewest
        live children) when the run has hosts. Each child leads its process group: a signal to
        the group reaches the process on a host, not only the `unshare` above it."""
        if not self.machines:
            return stack.spawn(command, *args)
        if machine is None:
            live = Counter(
                host.name
                for child in stack.children
                if child.poll() is None and (host := self.placed.get(child.pid))
            )
            machine = min(self.machines, key=lambda host: live[host.name])
        env = {
            **machine.environment(stack.env),
            "AGENTOPS_ARTIFACT_STORAGE": "postgres",
            "AGENTOPS_ARTIFACT_THRESHOLD_BYTES": str(HOSTS_ARTIFACT_THRESHOLD_BYTES),
            # Nothing shared through files: a host's disk is its own.
            "AGENTOPS_MEDIA_ROOT": str(self.media / machine.name),
        }
        child = stack.spawn_program(
            *machine.command(sys.executable, MANAGE, command, *args), env=env
        )
        self.placed[child.pid] = machine
        return child

    def _top_up(self) -> None:
        active = Task.objects.filter(pk__in=self.task_ids).exclude(status__in=[*TERMINAL, *WAITING])
        for _ in range(max(0, self.tasks - active.count())):
            self.task_ids.append(self._start_task().pk)

    def _start_task(self) -> Task:
        number = len(self.task_ids) + 1
        latency = {"model_seconds": self.model_seconds} if self.model_seconds else {}
        model_faults: dict[str, list[str]] = {}
        if self.rng.random() < 0.3:
            step = str(self.rng.randrange(0, 4))
            model_faults[step] = [self.rng.choice(MODEL_FAULTS)]
            self.faults[f"model.{model_faults[step][0]}"] += 1
        if self.rng.random() < 0.7:
            order = self._order(gated=self.rng.random() < 0.1)
            return task_create(
                agent="refund",
                goal=f"{GOAL_PREFIX} refund {number} ({order})",
                input={
                    "order_id": order,
                    "reason": "damaged",
                    "model_faults": model_faults,
                    **latency,
                },
            )
        return task_create(
            agent="trip",
            goal=f"{GOAL_PREFIX} trip {number}",
            input={
                "traveller": f"Traveller {number}",
                "destination": "FCO",
                "date": "2026-12-17",
                **latency,
            },
        )

    def _held_by(self, pid: int) -> int:
        """Tasks the worker `pid` of this host holds (its calls in flight, mostly)."""
        return Task.objects.filter(
            pk__in=self.task_ids,
            status=TaskStatus.RUNNING,
            lease_owner__startswith=f"{socket.gethostname()}:{pid}:",
        ).count()

    def _order(self, *, gated: bool) -> str:
        """An order whose refund the default policy gates (over 100) or lets through."""
        while True:
            order_id = f"C{self.rng.randrange(1000, 99999)}"
            if (order(order_id)["amount"] > 100) == gated:
                return order_id

    def _kill(
        self, stack: Stack, workers: list[subprocess.Popen[bytes]]
    ) -> list[subprocess.Popen[bytes]]:
        """SIGKILL a random worker (wherever it is: in a call, between calls, idle), start
        another; returns the live workers."""
        live = [child for child in workers if child.poll() is None]
        if live:
            victim = self.rng.choice(live)
            if not self.machines:  # the identity's pid is the host's own there
                self.held_at_kills.append(self._held_by(victim.pid))
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
            self.kills += 1
            live = [child for child in live if child is not victim]
        while len(live) < self.workers:
            live.append(self._spawn_worker(stack))
        return live

    def _fault(
        self, stack: Stack, workers: list[subprocess.Popen[bytes]]
    ) -> list[subprocess.Popen[bytes]]:
        """Now and then a freeze past the lease or a service fault; returns the live workers."""
        roll = self.rng.random()
        live = [child for child in workers if child.poll() is None]
        if roll < 0.02 and live and self.freezes < max(1, int(self.minutes)):
            victim = self.rng.choice(live)
            os.killpg(victim.pid, signal.SIGSTOP)
            time.sleep(LEASE_SECONDS + 1.5)  # past its lease: another worker takes over
            os.killpg(victim.pid, signal.SIGCONT)
            self.freezes += 1
        elif roll < 0.3:
            endpoint = self.rng.choice(KEYED_WRITES)
            mode = self.rng.choice(SERVICE_FAULTS)
            service, operation = endpoint.split(".")
            fault_set(service=service, operation=operation, mode=mode, count=1, delay=2.0)
            self.faults[f"service.{mode}"] += 1
        while len(live) < self.workers:
            live.append(self._spawn_worker(stack))
        return live

    def _settle(self) -> bool:
        """Wait until every task is terminal or waits for a human; False on timeout."""
        deadline = time.monotonic() + self.settle_seconds
        while time.monotonic() < deadline:
            moving = (
                Task.objects.filter(pk__in=self.task_ids)
                .exclude(status__in=[*TERMINAL, *WAITING])
                .count()
            )
            if moving == 0:
                return True
            time.sleep(1.0)
        return False

    # -- checking -------------------------------------------------------------------------

    def _report(self, calls: Path, *, settled: bool, seconds: float) -> dict[str, Any]:
        tasks = Task.objects.filter(pk__in=self.task_ids)
        statuses = Counter(tasks.values_list("status", flat=True))
        lost = [task.pk for task in tasks if not _settled(task)]
        effects = self._effects()
        duplicate_keys = sum(1 for count in effects["per_key"].values() if count > 1)
        logical = sum(1 for count in effects["per_step"].values() if count > 1)
        completions = (
            Event.objects.filter(task__in=tasks, action="agentops.step.completed")
            .values("task_id", "step_ordinal")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .count()
        )
        gaps = [
            row["task_id"]
            for row in Event.objects.filter(task__in=tasks)
            .values("task_id")
            .annotate(n=Count("id"), top=Max("seq"))
            if row["n"] != row["top"]
        ]
        resumes = self._resume_seconds(tasks)
        model_calls = self._model_calls(calls, tasks)
        broken = {
            "duplicate_effects": duplicate_keys,
            "logical_duplicate_effects": logical,
            "lost_tasks": len(lost),
            "steps_completed_twice": completions,
            "event_gaps": len(gaps),
        }
        return {
            "ok": settled and not any(broken.values()),
            "settled": settled,
            "seconds": round(seconds, 1),
            "kills": self.kills,
            "tasks_per_worker": self.tasks_per_worker,
            "model_seconds": self.model_seconds,
            "tasks_held_at_kill_max": max(self.held_at_kills, default=None),
            "tasks_held_at_kill_total": sum(self.held_at_kills),
            "freezes": self.freezes,
            "redis_flushes": self.redis_flushes,
            "faults": dict(sorted(self.faults.items())),
            "tasks": len(self.task_ids),
            "task_statuses": dict(sorted(statuses.items())),
            "effects": effects["total"],
            **broken,
            "lost_task_ids": lost[:20],
            "resumes": len(resumes),
            "resume_p50_s": _percentile(resumes, 50),
            "resume_p99_s": _percentile(resumes, 99),
            "model_calls_per_completed_step": model_calls,
            **(self._hosts_seen(tasks) if self.machines else {}),
        }

    def _hosts_seen(self, tasks: Any) -> dict[str, Any]:
        """Per host, its claims and the identities (host:pid:token) of the processes that made
        them; the tasks claimed on more than one host; the artifacts of the run's tasks."""
        claims: Counter[str] = Counter()
        identities: dict[str, set[str]] = {machine.name: set() for machine in self.machines}
        hosts_of: dict[int, set[str]] = {}
        for task_id, owner in Event.objects.filter(
            task__in=tasks, action="agentops.task.claimed"
        ).values_list("task_id", "payload__owner"):
            host, pid, token = str(owner).split(":")[:3]
            claims[host] += 1
            identities.setdefault(host, set()).add(f"{host}:{pid}:{token}")
            hosts_of.setdefault(task_id, set()).add(host)
        return {
            "hosts": {
                host: {"claims": claims[host], "identities": sorted(seen)}
                for host, seen in sorted(identities.items())
            },
            "tasks_on_several_hosts": sum(1 for hosts in hosts_of.values() if len(hosts) > 1),
            "artifacts": Artifact.objects.filter(task__in=tasks).count(),
        }

    def _effects(self) -> dict[str, Any]:
        """Effects of this run's tasks, per sent key and per (task, step, endpoint)."""
        per_key: Counter[str] = Counter()
        per_step: Counter[tuple[str, str, str]] = Counter()
        total = 0
        prefixes = tuple(f"t{pk}-" for pk in self.task_ids)
        for service, operation, key in Effect.objects.values_list(
            "service", "operation", "request_key"
        ):
            if not key.startswith(prefixes):
                continue
            total += 1
            per_key[f"{service}.{operation}:{key}"] += 1
            task_step = "-".join(key.split("-")[:2])  # t<task>-s<step>
            per_step[(task_step, service, operation)] += 1
        return {"total": total, "per_key": per_key, "per_step": per_step}

    def _resume_seconds(self, tasks: Any) -> list[float]:
        """For each takeover, the time from the task's last event before it to the claim."""
        seconds = []
        claims = Event.objects.filter(
            task__in=tasks, action="agentops.task.claimed", payload__recovered=True
        ).values_list("task_id", "seq", "created_at")
        for task_id, seq, claimed_at in claims:
            before = (
                Event.objects.filter(task_id=task_id, seq=seq - 1)
                .values_list("created_at", flat=True)
                .first()
            )
            if before is not None:
                seconds.append((claimed_at - before).total_seconds())
        return seconds

    def _model_calls(self, calls: Path, tasks: Any) -> dict[str, float | None]:
        """Model requests per completed step (failed attempts included)."""
        requests: Counter[tuple[int, int]] = Counter()
        ids = set(self.task_ids)
        for line in calls.read_text().splitlines() if calls.exists() else []:
            call = json.loads(line)
            if call["task"] in ids:
                requests[(call["task"], call["step"])] += 1
        done = Step.objects.filter(task__in=tasks, status=StepStatus.SUCCEEDED).values_list(
            "task_id", "ordinal"
        )
        counts = [requests[(task_id, ordinal)] for task_id, ordinal in done]
        if not counts:
            return {"mean": None, "max": None}
        return {"mean": round(statistics.mean(counts), 3), "max": max(counts)}


def _settled(task: Task) -> bool:
    """Terminal, or waiting for a human with a reason (a gate, a recorded failure, a pause)."""
    if task.status in TERMINAL:
        return True
    if task.status == TaskStatus.NEEDS_ATTENTION:
        return bool(task.failure)
    return task.status in WAITING


def _percentile(values: list[float], percent: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))
    return round(ordered[index], 2)


def chaos_markdown(report: dict[str, Any]) -> str:
    verdict = "all invariants hold" if report["ok"] else "INVARIANTS BROKEN"
    lines = [
        f"# Chaos run: {verdict}",
        "",
        f"{report['seconds']} s, {report['tasks']} tasks, {report['kills']} worker kills, "
        f"{report['freezes']} freezes past the lease, {report['redis_flushes']} Redis flush, "
        f"{sum(report['faults'].values())} injected faults, {report['effects']} effects.",
        "",
        "| invariant | count |",
        "|---|---|",
    ]
    for key in (
        "duplicate_effects",
        "logical_duplicate_effects",
        "lost_tasks",
        "steps_completed_twice",
        "event_gaps",
    ):
        lines.append(f"| {key.replace('_', ' ')} | {report[key]} |")
    calls = report["model_calls_per_completed_step"]
    lines += [
        "",
        f"Settled: {'yes' if report['settled'] else 'no'}. Statuses: {report['task_statuses']}.",
        f"Faults: {report['faults']}.",
        f"Resumes after a takeover: {report['resumes']}, p50 {report['resume_p50_s']} s, "
        f"p99 {report['resume_p99_s']} s.",
        f"Model calls per completed step: mean {calls['mean']}, max {calls['max']}.",
    ]
    if "hosts" in report:
        lines += [
            f"On {name}: {seen['claims']} claims by {len(seen['identities'])} processes "
            f"({', '.join(seen['identities'])})."
            for name, seen in report["hosts"].items()
        ]
        lines.append(
            f"Tasks claimed on more than one host: {report['tasks_on_several_hosts']}; "
            f"artifacts (in PostgreSQL): {report['artifacts']}."
        )
    return "\n".join(lines)
