"""Leases: one claimant wins, a superseded holder writes nothing, Redis loss is recovered."""

from __future__ import annotations

import multiprocessing
import time
from datetime import timedelta

import django_rq
import pytest
from django.db import connections, transaction
from django.utils import timezone

from agentops.engine.errors import LeaseLost
from agentops.engine.leases import Heartbeat, lease_renew
from agentops.engine.transitions import EventSpec, fenced_write, task_claim
from agentops.models import Event, Task
from agentops.services import task_abort, task_create, task_pause
from agentops.sim.models import Effect
from agentops.states import TaskStatus
from tests.conftest import wait_for

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
    django_rq.get_connection("default").flushdb()
    processes.worker(extra_env=slice_env)
    processes.sweeper()

    wait_for(
        lambda: Task.objects.filter(status=TaskStatus.SUCCEEDED).count() == len(tasks),
        timeout=90,
        message="every task to succeed after the flush",
    )
    assert Effect.objects.filter(service="payments").count() == len(tasks)
