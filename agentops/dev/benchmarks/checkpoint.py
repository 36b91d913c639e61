"""`manage.py bench checkpoint`: what one checkpointed step costs, against a raw-commit floor.

The benchmark runs the registered no-op agent `bench_noop` (one model call and one in-process tool
call per step) through the real runner on the configured database, one `task_advance` call per
task with a slice long enough to finish it, and in the same run a floor: a raw psycopg 3
connection that inserts one row carrying the step's tool result into a logged table and
commits, once per step. Floor and task runs alternate, one pair per repeat, so drift on a shared
machine hits both; ratios are medians of the per-pair ratios.

Bytes and commits on PostgreSQL come from the WAL itself (pg_walinspect, superuser): the records
between two LSNs taken around a run that touch this database or belong to its transactions. This
excludes whatever other databases on the cluster write meanwhile. A step's bytes are taken per
snapshot interval, because the transactions that insert a snapshot are the only ones the WAL lets
us tie to a step number: `bytes_per_step_first` is the WAL of the first interval (the transactions
after the claim and the first step's start, up to the first snapshot's commit) divided by its
steps, `bytes_per_step_last` the same for the last interval (after the second-to-last snapshot).
Both leave out full-page images, reported apart (`fpi_bytes_per_step_*`): a page's first change
after a checkpoint logs the whole page, so they follow the cluster's checkpoints, not the step.
`wal_bytes_per_step` is everything the run wrote, images included, over all its steps.
A temporary replication slot keeps those segments until they are read.

Each run starts with one unmeasured warm-up pair, and runs with DEBUG off and the worker's heap
settings (`engine/heap.py`), as workers do. The command deletes its tasks, their artifact files
and the floor table. Performance belongs here, printed as figures; tests only check that the
command runs and what it counts. The WAL and the statements are read by `wal.py`; the medians,
ratios and printed table are `checkpoint_report.py`'s.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, suppress
from itertools import pairwise
from pathlib import Path
from typing import IO, Any, NoReturn, cast

import psycopg
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import override_settings
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.worker import Worker

from agentops.agents.bench import KIND_TOOLS, bench_script
from agentops.dev.benchmarks.checkpoint_report import (
    Pair,
    median_of,
    ratio_to_floor,
    report_of,
    rounded,
)
from agentops.dev.benchmarks.checkpoint_wal import wal_figures
from agentops.dev.benchmarks.peers import PEERS
from agentops.dev.benchmarks.tasks import (
    bench_tasks_delete,
    database_drop,
    database_recreate,
    raw_postgres,
    scratch_database_name,
)
from agentops.dev.benchmarks.wal import StatementCounter, WalReader
from agentops.engine import heap, task_create
from agentops.engine.dispatch import job_id_for
from agentops.engine.model import ModelRequest
from agentops.engine.runner import task_advance
from agentops.models import Task
from agentops.plumbing import queues
from agentops.plumbing.dburl import database_url
from agentops.states import TaskStatus
from policies.services import policy_install

AGENT = "bench_noop"
# What a step does (`agents/bench.py`): a read-only tool call or a text reply commit once, a
# tool call with a side effect twice. The targets, in floors per step.
KINDS = tuple(KIND_TOOLS)
KIND_TARGETS = {"read": 5.0, "reply": 5.0, "effect": 8.0}
# A kind whose tool call fails once every N steps (`--fail-every`): "read/fail10".
FAILING = "/fail"
# The bench tasks' own policy: both tools run (`auto`, the shipped read rule's 5% sampled for
# audit), so a side-effect step is not parked at the shipped default's gate.
BENCH_POLICY = "bench"
_GATE = {"approver_group": "operators", "timeout_seconds": 3600, "timeout_action": "reject"}
BENCH_RULES: list[dict[str, Any]] = [
    {
        "name": "bench tools",
        "route": "auto",
        "side_effects": ["read", "write"],
        "sample_rate": 0.05,
    },
    {"name": "default", "route": "gate", "is_default": True, **_GATE},
]
FLOOR_TABLE = "agentops_bench_floor"
# The floor is cheap and short runs of it are noisy: it commits at least this many rows per run.
FLOOR_MIN_ROWS = 50
# Measured in their own virtualenv (`make peers-venv`) by this script, with the same work.
PEERS_SCRIPT = Path(__file__).with_name("peers.py")
# The longest a peer may take to answer (a warm-up, or a pair: 20 steps at 500 KB take
# LangGraph's PostgresSaver about 3 s here).
ANSWER_SECONDS = 600
# What a peer's process inherits of ours (no secrets, no tracing settings), and the heap.
PEER_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
OWNER = "bench"


class Floor:
    """One INSERT of the step's tool result + commit per step, on a raw connection."""

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw
        raw.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        raw.execute(
            f"CREATE TABLE {FLOOR_TABLE} (id bigserial PRIMARY KEY, payload jsonb NOT NULL)"
        )

    def insert(self, rows: list[str]) -> float:
        sql = f"INSERT INTO {FLOOR_TABLE} (payload) VALUES (%s)"
        began = time.perf_counter()
        for row in rows:
            self.raw.execute(sql, (row,))  # autocommit: one round trip, one commit
        return time.perf_counter() - began

    def close(self) -> None:
        self.raw.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")


def step_arguments(steps: int, payload_kb: int, step: int) -> dict[str, Any]:
    """The tool arguments the bench agent's own script proposes at `step`."""
    request = ModelRequest(
        agent=AGENT,
        task_id=0,
        step=step,
        step_title="",
        attempt=1,
        messages=[],
        tools=[],
        task_input={"steps": steps, "payload_kb": payload_kb},
    )
    return dict(bench_script(request)["tool_calls"][0]["arguments"])


def floor_rows(arguments: list[dict[str, Any]]) -> list[str]:
    """The JSON each step's tool returns (`bench_echo`: its arguments), step after step, for at
    least FLOOR_MIN_ROWS rows."""
    count = max(len(arguments), FLOOR_MIN_ROWS)
    return [json.dumps(_echoed(arguments[row % len(arguments)])) for row in range(count)]


def _echoed(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"n": arguments["n"], "payload": arguments["payload"]}


def bench_policy_ensure() -> None:
    """Install the bench tasks' policy (once per database)."""
    policy_install(
        name=BENCH_POLICY,
        description="Benchmark tasks: their tools run without a person.",
        rules=BENCH_RULES,
        sensitive_systems=[],
        change_note="The checkpoint benchmark's policy.",
    )


def checkpoint(
    *,
    steps: int,
    payload_kb: int,
    repeat: int,
    dispatch: int = 0,
    peers: Path | None = None,
    kinds: tuple[str, ...] = ("read",),
) -> dict[str, Any]:
    """Run the checkpoint benchmark (and, with `dispatch` jobs, the worker's cost per job; with
    `peers`, the Python of a virtualenv holding the peers, the same work through each peer).

    Raises CommandError when a bench task does not finish in one slice (a worker took it), or
    when a peer cannot run."""
    if peers is not None and not peers.is_file():
        raise CommandError(f"no peers' Python at {peers}: run `make peers-venv` first")
    conf = {**settings.AGENTOPS, "SLICE_SECONDS": 24 * 3600.0, "BACKOFF_BASE_SECONDS": 0.0}
    # The worker's heap settings (engine/heap.py): the runner runs here as it runs there.
    kept = heap.heap_keep_freed()
    # DEBUG makes every query log itself (about a fifth of a step here): workers in
    # production run without it, so the benchmark does too.
    with heap.heap_frozen_while(), override_settings(AGENTOPS=conf, DEBUG=False):
        bench_policy_ensure()
        report = _checkpoint(
            steps=steps, payload_kb=payload_kb, repeat=repeat, peers=peers, kinds=kinds
        )
        if not kept:
            report["notes"].append("malloc runs as the environment or the C library sets it")
        if dispatch:
            report.update(_dispatch(jobs=dispatch, payload_kb=payload_kb))
    return report


class PeerProcess:
    """A peer (agentops/dev/benchmarks/peers.py, run by the peers' Python) in a scratch database
    `<name>_peer_<peer>` on the same server, dropped when it ends; it measures a pair (its own
    floor, then the same steps) each time it is asked, between ours.

    Its standard error goes to a file (a pipe nobody reads could fill and stall it), every
    answer is awaited at most ANSWER_SECONDS, and a peer that fails, hangs or answers anything
    but a line of JSON ends the benchmark with a CommandError carrying the end of its errors."""

    def __init__(self, peer: str, *, python: Path, work: dict[str, Any]) -> None:
        self.peer = peer
        self.database = scratch_database_name(f"peer_{peer.replace('-', '_')}")
        self.closed = False
        self.errors = ""
        self.pairs: list[dict[str, float]] = []
        self.answers: queue.Queue[str] = queue.Queue()
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        database_recreate(self.database)
        try:
            self.process = subprocess.Popen(
                [str(python), str(PEERS_SCRIPT), "--peer", peer],
                env=_peer_environment(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                text=True,
            )
        except OSError as exc:
            self.stderr.close()
            database_drop(self.database)
            raise CommandError(f"peer {peer} cannot start: {exc}") from None
        threading.Thread(target=self._read_answers, daemon=True).start()
        # The work goes in a file (more than a pipe holds, and a peer may read none of it),
        # with the database's URL: a password on a command line is visible to `ps`.
        url = database_url(connection.settings_dict, name=self.database)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
            json.dump({**work, "database_url": url}, handle)
            handle.flush()
            self.version = self._ask(handle.name)["version"]

    def _read_answers(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(line)
        self.answers.put("")  # the peer's output ended

    def _ask(self, line: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        with suppress(BrokenPipeError):  # it died: its errors say why
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        try:
            answer = self.answers.get(timeout=ANSWER_SECONDS)
        except queue.Empty:
            self._fail(f"did not answer within {ANSWER_SECONDS} s")
        if not answer:
            self._fail(f"ended (exit status {self.process.wait()})")
        try:
            return cast(dict[str, Any], json.loads(answer))
        except ValueError:
            self._fail(f"answered {answer[:200]!r}, not a line of JSON")

    def _fail(self, why: str) -> NoReturn:
        self.close(kill=True)
        raise CommandError(f"peer {self.peer} {why}:\n{self.errors}")

    def pair(self) -> None:
        self.pairs.append(self._ask("pair"))

    def close(self, *, kill: bool = False) -> None:
        """End the peer (at the end of its input; `kill`: at once) and drop its database."""
        if self.closed:
            return
        self.closed = True
        if kill and self.process.poll() is None:
            self.process.kill()
        with suppress(OSError):
            cast(IO[str], self.process.stdin).close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.seek(0)
        self.errors = self.stderr.read()[-3000:]
        self.stderr.close()
        database_drop(self.database)

    def figures(self) -> dict[str, Any]:
        def median(key: str) -> float | None:
            return rounded(median_of([p[key] for p in self.pairs]))

        return {
            "peer": self.peer,
            "version": self.version,
            "per_step_ms": median("task_ms_per_step"),
            "client_cpu_ms_per_step": median("cpu_ms_per_step"),
            "floor_per_step_ms": median("floor_ms_per_step"),
            "ratio_to_floor": ratio_to_floor(
                [p["task_ms_per_step"] for p in self.pairs],
                [p["floor_ms_per_step"] for p in self.pairs],
            ),
            "runs": [{k: rounded(v) for k, v in p.items()} for p in self.pairs],
        }


def _peer_environment() -> dict[str, str]:
    """A peer runs with little of our environment and the heap settings we run with."""
    kept = {name: os.environ[name] for name in PEER_ENVIRONMENT if name in os.environ}
    return {**kept, **heap.heap_environment()}


def _peer_figures(report: dict[str, Any], peers: list[PeerProcess]) -> dict[str, Any]:
    """The peers' medians, and how our step compares with the cheapest of them (ratios to
    floor, and per-step times in the same run)."""
    figures = [peer.figures() for peer in peers]
    best = min(figures, key=lambda peer: peer["ratio_to_floor"])
    return {
        "peers": figures,
        "best_peer": best["peer"],
        "ratio_to_best_peer": rounded(report["ratio_to_floor"] / best["ratio_to_floor"], 2),
        "per_step_to_best_peer": rounded(report["per_step_ms"] / best["per_step_ms"], 2),
    }


def _checkpoint(
    *, steps: int, payload_kb: int, repeat: int, peers: Path | None, kinds: tuple[str, ...]
) -> dict[str, Any]:
    arguments = [step_arguments(steps, payload_kb, step) for step in range(steps)]
    rows = floor_rows(arguments)
    # The peers build the same rows from the arguments (peers.floor_rows).
    work = {"arguments": arguments, "floor_rows": len(rows)}
    created: list[int] = []
    notes: list[str] = []
    running: list[PeerProcess] = []
    with raw_postgres() as raw, ExitStack() as stack:
        wal, note = WalReader.open(raw)
        if note:
            notes.append(note)
        floor = Floor(raw)
        stack.callback(floor.close)
        stack.callback(bench_tasks_delete, created)
        for peer in PEERS if peers is not None else ():
            # Each has warmed up before it answers; their pairs alternate with ours.
            running.append(PeerProcess(peer, python=cast(Path, peers), work=work))
            stack.callback(running[-1].close)
        _run_pairs(floor, rows, steps, payload_kb, created, wal=None, kinds=kinds)  # warm-up
        pairs: dict[str, list[Pair]] = {kind: [] for kind in kinds}
        for _ in range(repeat):
            for kind, pair in _run_pairs(
                floor, rows, steps, payload_kb, created, wal=wal, kinds=kinds
            ).items():
                pairs[kind].append(pair)
            for process in running:
                process.pair()
        if wal is not None:
            for kind_pairs in pairs.values():
                for pair in kind_pairs:
                    pair.figures = wal_figures(wal, pair, steps)
    reports = {
        kind: {
            **report_of(pairs[kind], steps=steps, payload_kb=payload_kb, notes=notes),
            "kind": kind,
            "target_ratio_to_floor": KIND_TARGETS[kind.partition(FAILING)[0]],
        }
        for kind in kinds
    }
    report = dict(reports[kinds[0]])
    if len(kinds) > 1:
        report["kinds"] = reports
    if running:
        report.update(_peer_figures(report, running))
    return report


def _run_pairs(
    floor: Floor,
    rows: list[str],
    steps: int,
    payload_kb: int,
    created: list[int],
    *,
    wal: WalReader | None,
    kinds: tuple[str, ...],
) -> dict[str, Pair]:
    """One floor run, then one task of each kind: each kind's pair shares the floor."""
    mark = wal.lsn() if wal else 0
    floor_seconds = floor.insert(rows)
    floor_wal = (mark, wal.lsn(flushed=True)) if wal else None
    return {
        kind: _run_task(
            kind, steps, payload_kb, created, wal=wal, floor=(floor_seconds, len(rows), floor_wal)
        )
        for kind in kinds
    }


def _run_task(
    kind: str,
    steps: int,
    payload_kb: int,
    created: list[int],
    *,
    wal: WalReader | None,
    floor: tuple[float, int, tuple[int, int] | None],
) -> Pair:
    base, _, failing = kind.partition(FAILING)
    task_input: dict[str, Any] = {"steps": steps, "payload_kb": payload_kb, "kind": base}
    if failing:
        task_input["fail_every"] = int(failing)
    task = task_create(agent=AGENT, goal="bench", input=task_input, policy=BENCH_POLICY)
    created.append(task.pk)
    _drop_job(task.pk)
    counter = StatementCounter()
    mark = wal.lsn() if wal else 0
    with connection.execute_wrapper(counter):
        began, cpu = time.perf_counter(), time.process_time()
        outcome = task_advance(task_id=task.pk, owner=OWNER)
        # A failed step parks for its retry (no backoff here): the same worker claims it
        # again, on the same connection, with the statements it prepared.
        while outcome == "retry scheduled":
            _drop_job(task.pk)
            outcome = task_advance(task_id=task.pk, owner=OWNER)
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    task_wal = (mark, wal.lsn(flushed=True)) if wal else None

    task.refresh_from_db()
    if outcome != "succeeded" or task.status != TaskStatus.SUCCEEDED:
        raise CommandError(
            f"bench task {task.pk} did not finish in one slice: {outcome} ({task.status}); "
            "is a worker consuming this queue? Stop it or point REDIS_URL elsewhere."
        )
    floor_seconds, floor_rows_count, floor_wal = floor
    return Pair(
        task_id=task.pk,
        task_seconds=seconds,
        task_cpu_seconds=cpu,
        floor_seconds=floor_seconds,
        floor_rows=floor_rows_count,
        statements=counter.statements,
        hook_commits=counter.commits,
        task_wal=task_wal,
        floor_wal=floor_wal,
    )


def _dispatch(*, jobs: int, payload_kb: int) -> dict[str, Any]:
    """Time `jobs` 1-step tasks advanced in-process, then `jobs` more through a burst worker.

    A job's cost in the worker is the median gap between consecutive job starts (dequeue,
    bookkeeping in Redis, the advance itself), which leaves out the process start-up.
    """
    queue = queues.queue()
    if queue.count or Worker.count(queue=queue):
        return {
            "dispatch_ms_per_job": None,
            "dispatch_note": "skipped: the queue has jobs or a worker already listens on it",
        }
    task_input = {"steps": 1, "payload_kb": payload_kb}
    created: list[int] = []
    job_ids: list[str] = []
    try:
        in_process = []
        for _ in range(jobs):
            task = task_create(agent=AGENT, goal="bench dispatch", input=task_input)
            created.append(task.pk)
            _drop_job(task.pk)
            began = time.perf_counter()
            task_advance(task_id=task.pk, owner=OWNER)
            in_process.append(time.perf_counter() - began)
        queued = [
            task_create(agent=AGENT, goal="bench dispatch", input=task_input).pk
            for _ in range(jobs)
        ]
        created.extend(queued)
        job_ids = [
            job_id_for(pk, seq)
            for pk, seq in Task.objects.filter(pk__in=queued).values_list("pk", "last_seq")
        ]
        worker = subprocess.run(
            [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "worker", "--burst"],
            env={
                **os.environ,
                "DATABASE_URL": _database_url(),
                "REDIS_URL": settings.RQ_QUEUES["default"]["URL"],
                # The worker runs as the in-process advances do: DEBUG off (with AGENTOPS_DEV it
                # would be on, and every query would log itself), the same time slice.
                "DJANGO_DEBUG": "0",
                "AGENTOPS_SLICE_SECONDS": str(settings.AGENTOPS["SLICE_SECONDS"]),
            },
            timeout=60 + jobs * 10,
            capture_output=True,
            text=True,
        )
        if worker.returncode != 0:
            raise CommandError(
                f"the burst worker ended with status {worker.returncode}; its output ends:\n"
                f"{worker.stderr[-4000:]}"
            )
        finished = Job.fetch_many(job_ids, connection=queue.connection, serializer=queue.serializer)
        starts = sorted(job.started_at for job in finished if job and job.started_at)
        unfinished = Task.objects.filter(pk__in=queued).exclude(status=TaskStatus.SUCCEEDED)
        if unfinished.exists() or len(starts) < 2:
            raise CommandError(
                f"dispatch: {unfinished.count()} of {jobs} tasks did not succeed in the "
                f"worker ({len(starts)} jobs started)"
            )
        gaps = [(b - a).total_seconds() for a, b in pairwise(starts)]
        for job in finished:
            if job is not None:
                job.delete()
    finally:
        bench_tasks_delete(created)
    worker_ms = statistics.median(gaps) * 1000
    in_process_ms = statistics.median(in_process) * 1000
    return {
        "dispatch_ms_per_job": rounded(worker_ms - in_process_ms),
        "worker_ms_per_job": rounded(worker_ms),
        "in_process_ms_per_job": rounded(in_process_ms),
        "dispatch_jobs": jobs,
    }


def _drop_job(task_id: int) -> None:
    """The task was enqueued on commit; remove that job so no worker races the bench for it.

    If a worker already took it, the in-process claim fails and the bench says so."""
    queue = queues.queue()
    token = Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()
    with suppress(NoSuchJobError):
        Job.fetch(
            job_id_for(task_id, token), connection=queue.connection, serializer=queue.serializer
        ).delete()


def _database_url() -> str:
    """DATABASE_URL for a child process, pointing at the database this process uses."""
    return database_url(connection.settings_dict)
