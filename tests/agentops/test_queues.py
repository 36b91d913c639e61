"""The queue and its Redis client: one connection per process, not one per enqueue, and a
deadline on every command."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from agentops.engine import task_create
from agentops.engine.dispatch import enqueue_now
from agentops.management.commands.worker import WORKER_TTL_SECONDS
from agentops.models import Task
from agentops.plumbing import queues
from agentops.states import TaskStatus
from tests.conftest import wait_for
from tests.partition import Partition


def test_enqueues_go_over_one_redis_connection(redis_clean):
    client = queues.redis_client()
    connection_id = client.client_id()

    for token in range(20):
        assert enqueue_now(task_id=1, token=token)
    assert not enqueue_now(task_id=1, token=19)  # already waiting

    assert queues.queue().connection is client
    assert queues.queue().count == 20
    assert client.client_id() == connection_id


@pytest.mark.django_db
def test_a_redis_that_never_answers_costs_a_task_start_the_queue_deadline_and_loses_nothing(
    queue_on_black_hole, caplog
):
    began = time.monotonic()
    task = task_create(agent="refund", goal="Refund A1001", input={"order_id": "A1001"})
    took = time.monotonic() - began

    assert queues.DEADLINE_SECONDS <= took < queues.DEADLINE_SECONDS + 5  # not forever
    assert len(queue_on_black_hole.connections) == 1
    # The task is recorded, queued, for the sweeper to enqueue once Redis answers.
    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED
    # The product's words around the client's own (redis-py words its timeouts per release).
    (logged,) = [r.getMessage() for r in caplog.records if r.name == "agentops.engine.dispatch"]
    assert logged.startswith(f"task {task.pk}: not enqueued (TimeoutError: ")
    assert logged.endswith("); the sweeper will enqueue it")


@pytest.mark.django_db
def test_readyz_answers_503_within_the_queue_deadline_when_redis_never_answers(
    queue_on_black_hole,
):
    began = time.monotonic()
    ready = Client().get("/readyz")
    took = time.monotonic() - began

    assert (ready.status_code, ready.content) == (503, b"not ready\n")
    assert queues.DEADLINE_SECONDS <= took < queues.DEADLINE_SECONDS + 5  # not forever


def test_the_queue_client_connects_within_the_deadline():
    kwargs = queues.redis_client().connection_pool.connection_kwargs

    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == queues.DEADLINE_SECONDS


# -- a worker cut off from Redis ----------------------------------------------------------------


def _succeeded(task_id: int) -> bool:
    return Task.objects.get(pk=task_id).status == TaskStatus.SUCCEEDED


@pytest.mark.outage
@pytest.mark.django_db(transaction=True)
def test_a_worker_cut_off_from_redis_takes_jobs_again_within_30_s_of_redis_answering(processes):
    """A partition: Redis stops answering the worker without closing its connection. Once it
    answers again the worker gives up its silent connection at its read timeout and opens a new
    one (RQ's default held it for 415 s)."""
    partition, database = partition_of(processes.env["REDIS_URL"])
    through = f"redis://127.0.0.1:{partition.port}/{database}"
    worker = processes.worker(extra_env={"REDIS_URL": through})
    with processes.logs_on_failure(worker):
        took, paced, stranded = _cut_off_and_healed(processes, partition)
    print(f"taken and run {took:.1f} s after Redis answered again (a task took {paced:.1f} s)")

    assert stranded
    # Its read timeout and RQ's longest wait before it tries again: 30 s; then the task, at the
    # machine's present pace (twice a task's time just before).
    assert took < WORKER_TTL_SECONDS + 2 * paced


def partition_of(url: str) -> tuple[Partition, str]:
    """A partition in front of the Redis of `url` (TCP, or the embedded server's Unix socket),
    and the database number the URL names."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return Partition(parts.path), parse_qs(parts.query).get("db", ["0"])[0]
    return Partition((parts.hostname or "127.0.0.1", parts.port or 6379)), parts.path.strip("/")


def _cut_off_and_healed(processes: Any, partition: Partition) -> tuple[float, float, bool]:
    """Run a task through the worker, cut it off from Redis while a task waits, heal: how long
    after healing the task took, how long a task took before, and whether the task waited."""
    warm = task_create(agent="bench_noop", goal="before", input={"steps": 2})
    # Its worker's start is a process of its own from scratch on a loaded machine.
    wait_for(lambda: _succeeded(warm.pk), timeout=300, message="the worker to run a task")
    paced = time.monotonic()
    timed = task_create(agent="bench_noop", goal="timed", input={"steps": 2})
    wait_for(lambda: _succeeded(timed.pk), timeout=120, message="the worker to run a task")
    paced = time.monotonic() - paced

    partition.cut()  # the worker waits on the queue, on a connection that is now silent
    during = task_create(agent="bench_noop", goal="during", input={"steps": 2})
    # Redis hands the job to the worker's wait, and its answer is lost: the sweeper (not cut
    # off) finds the job in no queue and enqueues it again.
    processes.sweeper()
    wait_for(lambda: queues.queue().job_ids, timeout=120, message="the sweeper to re-drive it")
    stranded = not _succeeded(during.pk)
    partition.heal()
    healed = time.monotonic()
    wait_for(lambda: _succeeded(during.pk), timeout=120, message="the worker to take the job")
    return time.monotonic() - healed, paced, stranded
