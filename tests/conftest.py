"""Shared fixtures: real processes (simulated services, RQ workers, sweeper) on the test database.

Tests that use processes need `@pytest.mark.django_db(transaction=True)`: the processes see only
committed rows. Each process gets DATABASE_URL pointing at pytest-django's test database and a
Redis database of its own (REDIS_URL, default db 15), flushed before each test that uses it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
from django.conf import settings
from django.db import connection

from agentops.dev.hosts import Host
from agentops.plumbing import dburl
from tests import templatedb, zygote
from tests.blackhole import BlackHole

# The real OpenID Provider of the single sign-on tests, started by the first test that asks for it.
from tests.oidc_provider import oidc_provider, oidc_settings, oidc_workdir  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

# The property tests check what is generated, not how fast: on a loaded two-core machine input
# generation alone can pass Hypothesis' one-second health check and its per-example deadline.
hypothesis.settings.register_profile(
    "agentops", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile("agentops")
LEASE_SECONDS = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    """The test database, for the processes a test starts."""
    return dburl.database_url(connection.settings_dict)


class Processes:
    """Child processes of one test, killed (SIGKILL) at teardown if still running."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.children: list[subprocess.Popen[bytes] | zygote.Forked] = []

    def start(
        self, *args: str, extra_env: dict[str, str] | None = None, name: str = "proc"
    ) -> subprocess.Popen[bytes] | zygote.Forked:
        path = self.log_dir / f"{name}-{len(self.children)}.log"
        env = {**self.env, **(extra_env or {})}
        child: subprocess.Popen[bytes] | zygote.Forked
        if zygote.forkable(args, env):
            child = zygote.fork(args, env, path)  # a worker or a sweeper, without the start cost
        else:
            child = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), *args],
                cwd=ROOT,
                env=env,
                stdout=open(path, "wb"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.append(child)
        return child

    def start_on(
        self,
        host: Host,
        command: list[str],
        *,
        extra_env: dict[str, str] | None = None,
        name: str = "proc",
    ) -> subprocess.Popen[bytes]:
        """`command` on `host` (agentops.dev.hosts), reaching the database, Redis and the
        simulated services over its link."""
        env = host.environment({**self.env, **(extra_env or {})})
        child = subprocess.Popen(
            host.command(*command),
            cwd=ROOT,
            env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"},
            stdout=open(self.log_dir / f"{name}-{len(self.children)}.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.children.append(child)
        return child

    def worker(
        self,
        *,
        crash_at: str | None = None,
        burst: bool = False,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes] | zygote.Forked:
        env = dict(extra_env or {})
        if crash_at:
            env["AGENTOPS_CRASH_AT"] = crash_at
        return self.start("worker", *(["--burst"] if burst else []), extra_env=env, name="worker")

    def notices_worker(self) -> subprocess.Popen[bytes] | zygote.Forked:
        """A worker of the notices' queue (email, webhooks, Slack)."""
        return self.start("worker", "--queues", "notices", name="worker")

    def sweeper(self, interval: float = 0.3) -> subprocess.Popen[bytes] | zygote.Forked:
        return self.start("sweeper", "--interval", str(interval), name="sweeper")

    def log(self, child: subprocess.Popen[bytes] | zygote.Forked) -> str:
        (path,) = self.log_dir.glob(f"*-{self.children.index(child)}.log")
        return path.read_text(errors="replace")

    def finished(self, child: subprocess.Popen[bytes] | zygote.Forked, *, timeout: float) -> int:
        """The child's exit status once it ends. One still running after `timeout` is aborted
        (SIGABRT: with PYTHONFAULTHANDLER set, Python writes every thread's stack to its log
        first) and the test fails with that log."""
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGABRT)
            child.wait(timeout=30)
            command = " ".join(map(str, child.args[2:]))
            raise AssertionError(
                f"manage.py {command} still ran after {timeout:g} s; its log, with its "
                f"threads' stacks at the end:\n{self.log(child)}"
            ) from None

    @contextmanager
    def logs_on_failure(self, *children: subprocess.Popen[bytes] | zygote.Forked) -> Iterator[None]:
        """A wait inside that fails says what `children` logged."""
        try:
            yield
        except AssertionError as failure:
            logs = "\n".join(
                f"--- manage.py {' '.join(map(str, child.args[2:]))}:\n{self.log(child)}"
                for child in children
            )
            raise AssertionError(f"{failure}\n{logs}") from None

    def stop_all(self) -> None:
        for child in self.children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(timeout=10)


def silent_stops(*, workers_killed: bool = False) -> list[tuple[int, Any]]:
    """Tasks stopped for a person without a recorded reason, with their failure: no failure,
    a failure without a kind, or (unless the test killed workers) a step at its retry cap whose
    last try did not finish, which only a killed worker explains (`retries.cap_failure`)."""
    from django.db.models import Q

    from agentops.models import Task
    from agentops.states import TaskStatus

    silent = Q(failure__isnull=True) | Q(failure__kind__isnull=True)
    if not workers_killed:
        silent |= Q(failure__detail__unfinished=True)
    return list(
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
        .filter(silent)
        .values_list("pk", "failure")
    )


@pytest.fixture(scope="session", autouse=True)
def zygotes_stopped() -> Iterator[None]:
    """The warmed parents of the workers and sweepers (tests/zygote.py) end with the session."""
    yield
    zygote.stop_all()


@pytest.fixture(scope="session", autouse=True)
def stacks_fork(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The commands the tests run in-process that supervise processes of their own (`chaos`,
    `demo_scenario`: `agentops.dev.devstack.Stack`) fork their workers and sweepers from the
    warmed parents too, as `Processes.start` does; what else they start (the simulated services)
    starts as before. A chaos run restarts a worker after every kill."""
    from agentops.dev.devstack import Stack

    started = Stack.spawn
    logs = tmp_path_factory.mktemp("stack-forks")

    def spawn(stack: Stack, *args: str, env: dict[str, str] | None = None) -> Any:
        full = {**stack.env, **(env or {})}
        if not zygote.forkable(args, full):
            return started(stack, *args, env=env)
        child = zygote.fork(args, full, logs / f"{args[0]}-{uuid.uuid4().hex[:8]}.log")
        stack.children.append(child)  # type: ignore[arg-type]  # as much of Popen as Stack uses
        return child

    Stack.spawn = spawn  # type: ignore[method-assign]
    yield
    Stack.spawn = started  # type: ignore[method-assign]


# The tiers that start real processes (and are left out of `make test-fast`).
PROCESS_TIERS = ("browser", "crash", "install", "outage")


def truncates(item: pytest.Item) -> bool:
    """Whether `item` commits for real and truncates every table after it (a transactional
    test: `django_db(transaction=True)`, or a live server's)."""
    marker = item.get_closest_marker("django_db")
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(marker and marker.kwargs.get("transaction")) or bool(
        fixtures & {"transactional_db", "live_server"}
    )


def heavy_first(items: list[pytest.Item]) -> None:
    """Among the truncating tests (pytest-django orders them after the rolled-back ones), put
    the process tiers first: the longest tests start early and the run ends on short ones."""
    places = [n for n, item in enumerate(items) if truncates(item)]
    ordered = sorted(
        (items[n] for n in places),
        key=lambda item: not any(item.get_closest_marker(tier) for tier in PROCESS_TIERS),
    )
    for n, item in zip(places, ordered, strict=True):
        items[n] = item


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that truncate (`-m truncates` lists them; every other test is rolled back)
    and put the longest of them first.

    Under xdist each test goes to the next free worker, in this order, a process-tier test too:
    every worker has its own database, Redis database, simulated services and Chromium, and a
    test its own processes, ports and files. (No test is pinned to a worker with `xdist_group`:
    on pytest 9.2 xdist 3.8's `--dist loadgroup` ignores the mark, pytest-xdist issue #1386, so
    the per-module groups this hook used to add never took effect.) The order is kept: a
    worker runs every rolled-back test it gets before any test that empties the database."""
    committing = [
        item.nodeid
        for item in items
        if {"sim_server", "processes"} & set(getattr(item, "fixturenames", ()))
        and not truncates(item)
    ]
    if committing:
        # Their rows are committed by another process and outlive the test's rollback.
        raise pytest.UsageError(
            "tests using the real simulated services or processes must be transactional "
            "(or use the in-process `sim`): " + ", ".join(committing)
        )
    for item in items:
        if truncates(item):
            item.add_marker(pytest.mark.truncates)
    heavy_first(items)


def serialized_rollback_asked(items: list[pytest.Item]) -> bool:
    """Whether a test asks for its rows back after a transactional test (`serialized_rollback`):
    the test database's rows are then serialized once it is set up."""
    return any(
        (
            (marker := item.get_closest_marker("django_db")) is not None
            and marker.kwargs.get("serialized_rollback")
        )
        or "django_db_serialized_rollback" in getattr(item, "fixturenames", ())
        for item in items
    )


def run_id(config: pytest.Config) -> str:
    """The same for every xdist worker of one run (xdist's test run id), new for every run."""
    workerinput = getattr(config, "workerinput", {})
    return workerinput.get("testrunuid") or uuid.uuid4().hex


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest,
    django_test_environment: None,
    django_db_blocker: Any,
    django_db_use_migrations: bool,
    django_db_keepdb: bool,
    django_db_createdb: bool,
    django_db_modify_db_settings: None,
) -> Iterator[None]:
    """pytest-django's test database (`test_<name>`, `_gwN` under xdist), copied from a template
    migrated once for the run and kept for the next ones (tests/templatedb.py), not migrated
    per worker. `--reuse-db` keeps a worker's database while it copies the current template;
    `--create-db` migrates a new template. Without `--reuse-db` the copy is dropped at the end."""
    from django.db import connections
    from django.test.utils import teardown_databases

    if not django_db_use_migrations:
        raise pytest.UsageError("the suite's database needs its migrations (triggers, groups)")
    verbosity = request.config.option.verbose
    database = connections["default"]
    with django_db_blocker.unblock():
        old_name = database.settings_dict["NAME"]
        name, _ = templatedb.test_database_copied(
            database,
            keepdb=django_db_keepdb and not django_db_createdb,
            rebuild=run_id(request.config) if django_db_createdb else None,
            verbosity=verbosity,
        )
        templatedb.test_database_used(database, name)
        if serialized_rollback_asked(request.session.items):
            database._test_serialized_contents = database.creation.serialize_db_to_string()
    yield
    if django_db_keepdb:
        return  # kept for the next `--reuse-db` run
    with django_db_blocker.unblock():
        teardown_databases([(database, old_name, True)], verbosity=verbosity)


@pytest.fixture(scope="session")
def migrated_template(django_db_setup: None) -> str:
    """The migrated template the test database is a copy of (tests/templatedb.py), for a test
    that needs the schema on a server of its own."""
    return templatedb.COPIED_FROM["default"]


# What the post_migrate signal after a flush makes again, row for row: kept instead.
FLUSH_KEEPS = ("django_content_type", "auth_permission")


def rows_deleted_sql(tables: list[str], quote: Callable[[str], str]) -> list[str]:
    """Statements that empty `tables` (but FLUSH_KEEPS) with DELETE, in one transaction (Django's
    flush runs them in one), with triggers and foreign-key checks off for it: the record's guards
    refuse a DELETE, and every table that refers to another is emptied too."""
    return [
        "SET LOCAL session_replication_role = replica",
        *(f"DELETE FROM {quote(table)}" for table in tables if table not in FLUSH_KEEPS),
        "SET LOCAL session_replication_role = DEFAULT",
    ]


@pytest.fixture(scope="session", autouse=True)
def flush_deletes_rows() -> Iterator[None]:
    """A transactional test's teardown empties the tables with DELETE instead of TRUNCATE, and
    keeps the content types and permissions instead of making them again.

    After a test the tables hold a few rows. TRUNCATE replaces every table's and index's files:
    about 2 s for the schema's 31 tables on a loaded two-core machine, where DELETE of so few
    rows takes some 50 ms. The post_migrate signal that follows a flush re-creates the content
    types and permissions the TRUNCATE removed (about 90 queries, 0.5-1 s): kept, they need no
    signal. Every other table ends as empty as before, migration data included; sequences are
    not reset either way (a test that asks for that keeps TRUNCATE ... RESTART IDENTITY)."""
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate, emit = DatabaseOperations.sql_flush, flush.emit_post_migrate_signal
    kept = False  # whether the last flush kept the content types and permissions

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        nonlocal kept
        kept = not reset_sequences and bool(tables)
        if not kept:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return rows_deleted_sql(tables, self.quote_name)

    def post_migrate_unless_kept(*args: Any, **kwargs: Any) -> None:
        if not kept:
            emit(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        patch.setattr(flush, "emit_post_migrate_signal", post_migrate_unless_kept)
        yield


# Fixtures that give a test the database (besides the django_db marker).
_DB_FIXTURES = ("db", "transactional_db", "django_db_reset_sequences", "live_server")


@pytest.fixture(autouse=True)
def language_reset() -> Iterator[None]:
    """Every test starts and ends in the site's language. A request through the test client
    leaves the language it was answered in active in the thread (LocaleMiddleware activates it,
    and nothing in Django undoes that), so a test calling a form or a service after another
    test's Chinese request read Chinese (a web process is unaffected: every request activates its
    own language before anything reads it)."""
    from django.utils import translation

    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def every_stop_says_why(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test in which a task stopped for a person (needs_attention) without a recorded
    reason: no failure, a failure without a kind, or, in a test that kills no worker (not
    marked `crash`), a step that reached its retry cap with a last try that did not finish (an
    error escaped the engine and could not even be recorded on its step). One query at
    teardown, only in tests that use the database, while their rows are still there."""
    uses_db = request.node.get_closest_marker("django_db") is not None or any(
        name in request.fixturenames for name in _DB_FIXTURES
    )
    if not uses_db:
        yield
        return
    # Set up before this fixture, so torn down after it: the rows are there at its teardown
    # (rolled back or flushed only then), and a test's workers are stopped by then.
    request.getfixturevalue("_django_db_helper")
    yield
    from django.db import DatabaseError

    if connection.needs_rollback:
        return  # the test's transaction failed: it rolls back, nothing it wrote stays
    try:
        silent = silent_stops(workers_killed=request.node.get_closest_marker("crash") is not None)
    except DatabaseError:
        return  # the test left its transaction aborted (a refused statement): it rolls back
    if silent:
        pytest.fail(f"tasks stopped without a recorded reason: {silent}", pytrace=False)


def rolled_back(request: pytest.FixtureRequest) -> bool:
    """Whether the test runs in a transaction rolled back at its end (it uses the database,
    and not as a transactional test, which commits for real)."""
    marker = request.node.get_closest_marker("django_db")
    return not (
        marker is None
        or marker.kwargs.get("transaction")
        or "transactional_db" in request.fixturenames
    )


@pytest.fixture(autouse=True)
def code_commits_run_their_callbacks(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In a rollback-isolated test, `transaction.on_commit` callbacks run when the code's own
    transaction would have committed (tests/rollback.py); a transactional test commits for real."""
    if not rolled_back(request):
        yield
        return
    from tests.rollback import code_commits

    with code_commits(monkeypatch):
        yield


@pytest.fixture(scope="session")
def sim_server(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any
) -> Iterator[str]:
    """The simulated third-party services in their own process; yields their base URL."""
    with django_db_blocker.unblock():
        url = database_url()
    port = free_port()
    log = open(tmp_path_factory.mktemp("sim") / "sim.log", "wb")  # noqa: SIM115
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "agentops.dev.sim_settings"}
    child = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "runserver",
            f"127.0.0.1:{port}",
            "--noreload",
            "--skip-checks",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}/sim"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.post(f"{base}/orders/lookup", json={"order_id": "A1"}, timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        child.kill()
        raise RuntimeError("the simulated services did not start")
    settings.AGENTOPS["SIM_BASE_URL"] = base
    yield base
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()


@pytest.fixture
def sim(settings: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The simulated services in this process (tests/simulated.py), reached by the engine's own
    HTTP client: a test that kills no process uses them instead of `sim_server` and stays
    rollback-isolated. Yields their base URL."""
    from agentops.engine import runner
    from tests.simulated import BASE_URL, sim_client

    settings.AGENTOPS = {**settings.AGENTOPS, "SIM_BASE_URL": BASE_URL}
    timeout = settings.AGENTOPS["TOOL_TIMEOUT_SECONDS"]
    monkeypatch.setattr(runner, "http_client", lambda: sim_client(timeout))
    return BASE_URL


@pytest.fixture(autouse=True)
def throttle_counters_cleared() -> None:
    """Every test starts with no failed-login or bad-token counts: the counters live in Redis
    beyond one test (and one run), and every test client comes from 127.0.0.1."""
    from agentops.plumbing.throttle import throttle_forget_all

    throttle_forget_all()


@pytest.fixture
def redis_clean() -> Iterator[None]:
    from agentops.plumbing import queues

    conn = queues.redis_client()
    conn.flushdb()
    yield
    conn.flushdb()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    """A TCP server that accepts connections and never answers (tests/blackhole.py)."""
    hole = BlackHole()
    yield hole
    hole.close()


@pytest.fixture
def queue_on_black_hole(monkeypatch: pytest.MonkeyPatch, black_hole: BlackHole) -> BlackHole:
    """The queue's client made as the product makes it (`queues.with_deadline`), on a Redis
    that accepts connections and never answers."""
    from redis import Redis

    from agentops.plumbing import queues

    client = queues.with_deadline(Redis.from_url(f"redis://127.0.0.1:{black_hole.port}/0"))
    monkeypatch.setattr(queues, "redis_client", lambda: client)
    return black_hole


def process_env(sim_server: str, log_dir: Path) -> dict[str, str]:
    """The environment of the workers and the sweeper a test starts: the test database, this
    xdist worker's Redis database, the simulated services, and short leases and timeouts."""
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.RQ_QUEUES["default"]["URL"],
        "AGENTOPS_SIM_BASE_URL": sim_server,
        "AGENTOPS_LEASE_SECONDS": str(LEASE_SECONDS),
        "AGENTOPS_SWEEP_GRACE_SECONDS": "1",
        "AGENTOPS_BACKOFF_BASE_SECONDS": "0.2",
        "AGENTOPS_MODEL_CALL_LOG": str(log_dir / "model-calls.jsonl"),
        "AGENTOPS_TOOL_TIMEOUT_SECONDS": "3",
        # A process aborted (SIGABRT, `Processes.finished`) writes its threads' stacks first.
        "PYTHONFAULTHANDLER": "1",
    }


def process_settings(settings: Any, sim_server: str) -> None:
    """The test process's side of `process_env`: the same lease and simulated services."""
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "LEASE_SECONDS": LEASE_SECONDS,
        "SIM_BASE_URL": sim_server,
    }


@pytest.fixture
def processes(
    sim_server: str, redis_clean: None, tmp_path: Path, settings: Any
) -> Iterator[Processes]:
    """Start workers and a sweeper against the test database; all are killed at teardown."""
    process_settings(settings, sim_server)
    procs = Processes(process_env(sim_server, tmp_path), tmp_path)
    yield procs
    procs.stop_all()


@contextmanager
def record_clock_moved() -> Iterator[None]:
    """The record's guards (migration 0016: events and snapshots are never updated) off for one
    transaction, for a test that moves the record's clock back (a slice that took 61 s, a wait
    of two hours): the only rewrite of the record the suite does."""
    from django.db import transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        yield
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "condition",
) -> Any:
    """Poll until `predicate()` is truthy; fail the test with `message` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """On the embedded servers (no DATABASE_URL / REDIS_URL), stop those this run started, and
    say so: a server that was already running (`make run`'s, say) is left as it was. Under
    xdist only the controller does: it loaded the settings (and so started the servers, under
    `embedded`'s lock) before it started the workers, which only reuse them."""
    if hasattr(config, "workerinput"):
        return
    from agentops.dev import embedded

    started = embedded.started_here(settings.DATA_DIR / "embedded")
    if not started:
        return
    from django.db import connections

    connections.close_all()
    embedded.stop(
        settings.DATA_DIR / "embedded", postgres="postgres" in started, redis="redis" in started
    )
    names = " and ".join(sorted(started))
    print(f"\nstopped the embedded {names} this run started ({settings.DATA_DIR / 'embedded'})")
