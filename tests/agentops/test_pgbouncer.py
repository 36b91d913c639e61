"""Through a real PgBouncer in transaction pooling (tests/pgbouncer.py), with every guarantee.

The processes connect through the pooler with AGENTOPS_DB_POOL_MODE=transaction: no startup
options, no server-side cursors, no prepared statements, and the sweep lease in a row. Their
connection limits are the role's defaults in the test database (`manage.py dblimits --apply`),
shorter here than in production so that their effect shows within a test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from psycopg import sql

from agentops.engine import task_create
from agentops.models import Task
from agentops.plumbing.postgres.base import limits_missing
from tests.agentops.test_crash import (
    REFUND_STEP,
    _process_state,
    assert_finished_once,
    crash_then_recover,
)
from tests.agentops.test_deploy import manage
from tests.agentops.test_leases import _sweeps
from tests.conftest import (
    ROOT,
    Processes,
    database_url,
    free_port,
    process_env,
    process_settings,
    wait_for,
)
from tests.pgbouncer import PgBouncer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

# The pooled processes' limits: a frozen transaction is cut off after 2 s, a statement after 4 s.
WANTED = {
    "lock_timeout": "3s",
    "idle_in_transaction_session_timeout": "2s",
    "statement_timeout": "4s",
}
LIMITS = {
    "AGENTOPS_DB_LOCK_TIMEOUT": WANTED["lock_timeout"],
    "AGENTOPS_DB_IDLE_IN_TRANSACTION_TIMEOUT": WANTED["idle_in_transaction_session_timeout"],
    "AGENTOPS_DB_STATEMENT_TIMEOUT": WANTED["statement_timeout"],
}


@pytest.fixture(scope="session")
def bouncer(django_db_setup: Any, django_db_blocker: Any) -> Iterator[PgBouncer]:
    with django_db_blocker.unblock():
        pooler = PgBouncer(connection.settings_dict, free_port())
    pooler.start()
    yield pooler
    pooler.remove()


def role_defaults_reset() -> None:
    """No defaults for the role in the test database (direct connections carry their own)."""
    with psycopg.connect(database_url(), autocommit=True) as direct:
        for name in WANTED:
            direct.execute(
                sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} RESET {}").format(
                    sql.Identifier(connection.settings_dict["NAME"]), sql.Identifier(name)
                )
            )


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """What a `manage.py shell -c` printed last (the shell may say what it imported first)."""
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def pooled_env(bouncer: PgBouncer, sim_server: str, redis_clean: None, tmp_path, settings):
    """The processes' environment through the pooler, its role defaults set (and the pooler's
    server connections opened again after they are)."""
    process_settings(settings, sim_server)
    env = {
        **process_env(sim_server, tmp_path),
        **LIMITS,
        "DATABASE_URL": bouncer.url(connection.settings_dict["NAME"]),
        "AGENTOPS_DB_POOL_MODE": "transaction",
    }
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as through_pooler:
        missing = limits_missing(through_pooler, WANTED)
    if missing:
        applied = manage("dblimits", "--apply", env=env)
        assert "set as the role's defaults" in applied.stdout, applied.stderr
        bouncer.restart()
    return env


@pytest.fixture
def pooled(pooled_env: dict[str, str], tmp_path) -> Iterator[Processes]:
    procs = Processes(pooled_env, tmp_path)
    yield procs
    procs.stop_all()


def test_a_pooled_connection_without_the_roles_limits_is_refused_until_dblimits_sets_them(
    bouncer, pooled_env
):
    role_defaults_reset()
    bouncer.restart()
    shell = ["shell", "-c", "from agentops.models import Task; print(Task.objects.count())"]

    refused = manage(*shell, env=pooled_env)
    checked = manage("dblimits", env=pooled_env)
    worker = manage("worker", "--burst", env=pooled_env)
    applied = manage("dblimits", "--apply", env=pooled_env)
    bouncer.restart()
    accepted = manage(*shell, env=pooled_env)
    checked_again = manage("dblimits", env=pooled_env)
    direct = manage(
        "dblimits", env={**pooled_env, "DATABASE_URL": database_url(), "AGENTOPS_DB_POOL_MODE": ""}
    )

    for name in WANTED:  # every missing limit named, with its fix
        assert f"{name} is 0 (wanted" in refused.stderr
    assert "manage.py dblimits --apply" in refused.stderr
    assert checked.returncode == 1 and "lock_timeout is 0" in checked.stderr
    # A worker does not start without them: one line, its reason.
    assert worker.returncode == 1 and "lacks its limits" in worker.stderr
    assert "Traceback" not in worker.stderr
    assert applied.returncode == 0, applied.stderr
    assert accepted.returncode == 0 and last_line(accepted) == "0", accepted.stderr
    assert checked_again.returncode == 0
    assert "statement_timeout = 4s" in checked_again.stdout
    assert direct.returncode == 0  # direct connections ask for them at startup


def test_options_sent_to_the_pooler_are_refused_with_the_setting_to_use(bouncer, pooled_env):
    unpooled = manage("dblimits", env={**pooled_env, "AGENTOPS_DB_POOL_MODE": "direct"})

    assert unpooled.returncode != 0
    assert "AGENTOPS_DB_POOL_MODE=transaction" in unpooled.stderr


def test_through_the_pooler_a_runaway_statement_is_cancelled_at_its_limit(pooled_env):
    statement = (
        "import time\n"
        "from django.db import connection, OperationalError\n"
        "started = time.monotonic()\n"
        "try:\n"
        "    connection.cursor().execute('SELECT pg_sleep(60)')\n"
        "except OperationalError as error:\n"
        "    print(type(error.__cause__).__name__, round(time.monotonic() - started, 1))\n"
    )
    ran = manage("shell", "-c", statement, env=pooled_env)

    cause, seconds = last_line(ran).split()
    assert cause == psycopg.errors.QueryCanceled.__name__, ran.stderr
    assert 4 <= float(seconds) < 60


def test_through_the_pooler_a_frozen_transactions_locks_are_cut_off_and_another_finishes(
    pooled,
):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    frozen = pooled.worker(
        crash_at=f"inside_step_complete@{REFUND_STEP}",
        extra_env={"AGENTOPS_CRASH_SIGNAL": "SIGSTOP"},
    )
    wait_for(lambda: _process_state(frozen.pid) == "T", timeout=120, message="the worker to freeze")
    pooled.worker()
    pooled.sweeper()
    # Frozen until after this wait: the task finishes only if the server cut the frozen
    # transaction off (2 s idle) and released its row locks.
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_terminal,
        timeout=120,
        message="another worker to finish the task",
    )
    os.kill(frozen.pid, signal.SIGCONT)

    assert_finished_once(task, pooled)


@pytest.mark.parametrize("crash_at", ["after_claim", f"after_tool_call@{REFUND_STEP}"])
def test_through_the_pooler_a_killed_worker_is_taken_over_with_each_step_once(pooled, crash_at):
    task = crash_then_recover(pooled, crash_at)

    assert_finished_once(task, pooled)


def test_through_the_pooler_two_sweepers_never_sweep_at_the_same_time(pooled):
    for number in range(10):  # stale queued tasks (no worker runs), so each sweep has work
        task = task_create(agent="refund", goal=f"stale {number}", input={"order_id": "A1001"})
        Task.objects.filter(pk=task.pk).update(updated_at=task.created_at.replace(year=2000))
    sweepers = [
        pooled.start("sweeper", "--interval", "0.005", "-v", "2", name="sweeper") for _ in range(2)
    ]
    logs = [pooled.log_dir / f"sweeper-{number}.log" for number in range(len(sweepers))]
    wait_for(
        lambda: all(len(_sweeps(log)) >= 5 for log in logs), timeout=120, message="both to sweep"
    )
    pooled.stop_all()
    runs = [_sweeps(log) for log in logs]

    overlaps = [(a, b) for a in runs[0] for b in runs[1] if a[0] < b[1] and b[0] < a[1]]
    assert overlaps == []
    assert "ERROR" not in "".join(log.read_text() for log in logs)


EXPORT = """
from reviews.selectors import AuditFilters, DecisionFilters, audit_item_export, decision_log_iter
decisions = sum(1 for _ in decision_log_iter(filters=DecisionFilters(), chunk_size=3))
audit = sum(1 for _ in audit_item_export(filters=AuditFilters(), chunk_size=2))
print(decisions, audit)
"""


def test_through_the_pooler_concurrent_exports_read_every_row(pooled_env):
    from reviews.selectors import (
        AuditFilters,
        DecisionFilters,
        audit_item_export,
        decision_log_iter,
    )
    from tests.reviews.builders import audited_refund, decisions_logged

    for number in range(3):
        audited_refund(goal=f"Refund order A10{number:02d}")
    decisions_logged(count=20)
    decisions = sum(1 for _ in decision_log_iter(filters=DecisionFilters()))
    audit = sum(1 for _ in audit_item_export(filters=AuditFilters()))
    assert decisions >= 20 and audit >= 6  # many pages of 3 and of 2

    exports = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c", EXPORT],
            cwd=ROOT,
            env=pooled_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    outputs = [export.communicate(timeout=600) for export in exports]

    assert [out.strip().splitlines()[-1] for out, _ in outputs] == [f"{decisions} {audit}"] * 6


def test_bench_throughput_compares_direct_the_pooler_and_two_hosts(pooled_env, monkeypatch, capsys):
    for name, value in LIMITS.items():  # the role's defaults, which the pooled workers check
        monkeypatch.setenv(name, value)
    call_command(
        "bench", "throughput", "--through", "direct,pooled,hosts",
        "--pooler-url", pooled_env["DATABASE_URL"],
        "--workers", "1", "--tasks", "3", "--steps", "2", "--json",
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)

    assert list(report["ratio_to_direct"]) == ["direct", "pooled", "hosts"]
    assert report["ratio_to_direct"]["direct"] == 1.0
    for route, (run,) in report["runs"].items():
        assert run["route"] == route and run["tasks_succeeded"] == 3, run
        assert run["steps_per_second"] > 0 and report["ratio_to_direct"][route] > 0
    assert Task.objects.count() == 0  # the bench's tasks are gone
