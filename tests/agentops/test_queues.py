"""The queue and its Redis client: one connection per process, not one per enqueue."""

from __future__ import annotations

from agentops import queues
from agentops.engine.dispatch import enqueue_now


def test_enqueues_go_over_one_redis_connection(redis_clean):
    client = queues.redis_client()
    connection_id = client.client_id()

    for token in range(20):
        assert enqueue_now(task_id=1, token=token)
    assert not enqueue_now(task_id=1, token=19)  # already waiting

    assert queues.queue().connection is client
    assert queues.queue().count == 20
    assert client.client_id() == connection_id
