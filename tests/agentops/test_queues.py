"""The queue and its Redis client: one connection per process, not one per enqueue, and a
deadline on every command."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from agentops.engine import task_create
from agentops.engine.dispatch import enqueue_now
from agentops.plumbing import queues
from agentops.states import TaskStatus


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
