"""Leases: one claimant wins, a superseded holder writes nothing, Redis loss is recovered."""

from __future__ import annotations

import multiprocessing
import re
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import close_old_connections, connection, connections, transaction
from django.utils import timezone

from agentops.dev.sim.models import Effect
from agentops.engine import task_abort, task_create, task_pause
from agentops.engine.dispatch import enqueue_now, job_id_for
from agentops.engine.errors import LeaseLost
from agentops.engine.leases import Heartbeat, lease_renew
from agentops.engine.sweeper import sweep_exclusive, sweep_lease_claim
from agentops.engine.transitions import EventSpec, fenced_write, task_claim, task_claim_row
from agentops.models import Event, SweepLease, Task
from agentops.plumbing import queues
from agentops.states import TaskStatus
from tests.conftest import database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

RACES = 100


def _expire_lease(task_id: int) -> None:
    Task.objects.filter(pk=task_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def _racer(name: str, task_ids: list[int], barrier, results) -> None:  # type: ignore[no-untyped-def]
    connections.close_all()
    wins = []
    for task_id in task_ids:
        barrier.wait(timeout=30)
        if task_claim(task_id=task_id, owner=name) is not None:
            wins.append(task_id)
    connections.close_all()
    results.put((name, wins))


def test_two_worker_processes_racing_to_claim_a_task_exactly_one_wins(redis_clean):
    task_ids = [
        task_create(agent="refund", goal=f"race {i}", input={"order_id": "A1001"}).pk
        for i in range(RACES)
    ]
    connections.close_all()
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    results = context.Queue()
    racers = [
        context.Process(target=_racer, args=(name, task_ids, barrier, results))
        for name in ("worker-a", "worker-b")
    ]
    for racer in racers:
        racer.start()
    wins = dict(results.get(timeout=120) for _ in racers)
    for racer in racers:
        racer.join(timeout=30)

    assert all(racer.exitcode == 0 for racer in racers)
    assert sorted(wins["worker-a"] + wins["worker-b"]) == task_ids
    assert not set(wins["worker-a"]) & set(wins["worker-b"])
    claims = Task.objects.filter(pk__in=task_ids).values_list("claims", "lease_epoch")
    assert set(claims) == {(1, 1)}


def test_a_holder_whose_lease_was_taken_over_writes_nothing(redis_clean):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    first = task_claim(task_id=task.pk, owner="zombie")
    _expire_lease(task.pk)
    second = task_claim(task_id=task.pk, owner="successor")
    assert first is not None and second is not None and second.epoch == first.epoch + 1
    events_before = Event.objects.filter(task=task).count()

    with pytest.raises(LeaseLost), transaction.atomic():
        fenced_write(first, [EventSpec("agentops.step.started", step=0)], current_step=1)

    task.refresh_from_db()
    assert Event.objects.filter(task=task).count() == events_before
    assert task.current_step == 0
    assert task.lease_owner == "successor"
    assert not lease_renew(first)
    assert lease_renew(second)


def test_a_heartbeat_notices_a_takeover_and_stops_the_holder(redis_clean, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LEASE_SECONDS": 0.3}
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    first = task_claim(task_id=task.pk, owner="slow")
    assert first is not None

    with pytest.raises(LeaseLost), Heartbeat(first):
        _expire_lease(task.pk)
        assert task_claim(task_id=task.pk, owner="fast") is not None
        time.sleep(0.3)


def test_a_parked_or_terminal_task_cannot_be_claimed(redis_clean):
    paused = task_create(agent="refund", goal="p", input={"order_id": "A1001"})
    aborted = task_create(agent="refund", goal="a", input={"order_id": "A1001"})
    task_pause(task_id=paused.pk, actor=None)
    task_abort(task_id=aborted.pk, actor=None)

    assert task_claim(task_id=paused.pk, owner="w") is None
    assert task_claim(task_id=aborted.pk, owner="w") is None
    assert Task.objects.get(pk=paused.pk).status == TaskStatus.PAUSED


def test_a_claim_does_not_wait_behind_a_row_lock_held_by_a_frozen_holder(redis_clean):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    with psycopg.connect(database_url()) as frozen:
        frozen.execute("SELECT id FROM agentops_task WHERE id = %s FOR UPDATE", [task.pk])
        began = time.monotonic()
        blocked = task_claim(task_id=task.pk, owner="w")
        waited = time.monotonic() - began
        frozen.rollback()
    claimed = task_claim(task_id=task.pk, owner="w")

    assert blocked is None
    assert waited < 1.0  # not the lock_timeout (3 s), let alone the holder's freeze
    assert claimed is not None and claimed.epoch == 1


def test_a_claim_returns_the_row_as_it_left_it_and_counts_a_recovery(redis_clean):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    first = task_claim_row(task_id=task.pk, owner="w1")
    assert first is not None
    _expire_lease(task.pk)  # w1 died while running
    second = task_claim_row(task_id=task.pk, owner="w2")
    assert second is not None

    (lease, row), stored = second, Task.objects.get(pk=task.pk)
    assert {f.attname: getattr(row, f.attname) for f in Task._meta.concrete_fields} == {
        f.attname: getattr(stored, f.attname) for f in Task._meta.concrete_fields
    }
    assert (lease.epoch, lease.last_seq, lease.child) == (2, stored.last_seq, False)
    assert (stored.claims, stored.recoveries, stored.lease_owner) == (2, 1, "w2")
    claims = Event.objects.filter(task=task, action="agentops.task.claimed").order_by("seq")
    assert [e.payload for e in claims] == [
        {"owner": "w1", "recovered": False, "fold": {"status": "running"}},
        {"owner": "w2", "recovered": True, "fold": {"status": "running"}},
    ]
    assert claims.last().seq == stored.last_seq


def test_a_claim_replaces_a_connection_the_server_dropped_between_jobs(redis_clean):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    pid = connection.connection.info.backend_pid
    with psycopg.connect(database_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    close_old_connections()  # what the worker does before each job

    assert task_claim(task_id=task.pk, owner="w") is not None
    assert connection.connection.info.backend_pid != pid


def test_a_lease_runs_from_the_moment_the_claim_is_written(redis_clean, settings):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    lease_seconds = settings.AGENTOPS["LEASE_SECONDS"]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(1.2)")  # as if the claim had waited on a lock
        assert task_claim(task_id=task.pk, owner="w") is not None
        cursor.execute(
            "SELECT extract(epoch FROM lease_expires_at - now()) FROM agentops_task WHERE id = %s",
            [task.pk],
        )
        (remaining,) = cursor.fetchone()

    assert float(remaining) >= lease_seconds + 1.2


def test_only_one_sweeper_sweeps_at_a_time(redis_clean):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    Task.objects.filter(pk=task.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    queues.redis_client().flushdb()  # the job is lost: the sweeper must re-drive
    assert sweep_lease_claim("another host:1:0bad0bad")  # it sweeps, or died sweeping
    skipped = sweep_exclusive()
    SweepLease.objects.filter(pk=1).update(expires_at=timezone.now() - timedelta(seconds=1))
    swept = sweep_exclusive()  # its lease ran out

    assert skipped is None
    assert swept is not None and swept.enqueued == 1
    # Given back at the end of the sweep: the next sweeper need not wait for it to run out.
    assert sweep_lease_claim("a third host:1:0ddba11")


def _sweeps(log: Path) -> list[tuple[float, float]]:
    found = re.findall(r"sweep start=([\d.]+) end=([\d.]+)", log.read_text())
    return [(float(start), float(end)) for start, end in found]


def test_two_sweeper_processes_never_sweep_at_the_same_time(processes):
    for number in range(20):  # stale queued tasks (no worker runs), so each sweep has work
        task = task_create(agent="refund", goal=f"stale {number}", input={"order_id": "A1001"})
        Task.objects.filter(pk=task.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    sweepers = [
        processes.start("sweeper", "--interval", "0.005", "-v", "2", name="sweeper")
        for _ in range(2)
    ]
    logs = [processes.log_dir / f"sweeper-{number}.log" for number in range(len(sweepers))]
    wait_for(lambda: all(len(_sweeps(log)) >= 5 for log in logs), message="both to sweep")
    processes.stop_all()
    runs = [_sweeps(log) for log in logs]

    overlaps = [
        (a, b)
        for a in runs[0]
        for b in runs[1]
        if a[0] < b[1] and b[0] < a[1]  # the two intervals intersect
    ]
    assert overlaps == []


def test_a_job_popped_by_a_worker_that_died_is_enqueued_again(redis_clean):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    task.refresh_from_db()
    queue = queues.queue()
    job_id = job_id_for(task.pk, task.last_seq)
    # A worker took the job off the list and died before marking it started: its record still
    # says queued, but no queue holds it.
    assert queue.connection.lrem(queue.key, 0, job_id) == 1

    enqueued = enqueue_now(task.pk, token=task.last_seq)
    again = enqueue_now(task.pk, token=task.last_seq)

    assert enqueued is True and again is False
    assert queue.job_ids == [job_id]


def test_redis_flushed_mid_run_the_sweeper_recovers_every_task(processes):
    tasks = [
        task_create(agent="refund", goal=f"flush {i}", input={"order_id": "A1001"})
        for i in range(8)
    ]
    slice_env = {"AGENTOPS_SLICE_SECONDS": "0.01"}
    processes.worker(extra_env=slice_env)
    wait_for(
        lambda: (
            Task.objects.filter(status=TaskStatus.SUCCEEDED).exists()
            or Event.objects.filter(action="agentops.task.yielded").exists()
        ),
        message="the worker to make progress",
    )
    queues.redis_client().flushdb()
    processes.worker(extra_env=slice_env)
    processes.sweeper()

    wait_for(
        lambda: Task.objects.filter(status=TaskStatus.SUCCEEDED).count() == len(tasks),
        timeout=90,
        message="every task to succeed after the flush",
    )
    assert Effect.objects.filter(service="payments").count() == len(tasks)
