"""The worker process: RQ's bookkeeping without the round trips that change nothing."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from rq.serializers import JSONSerializer

from agentops.management.commands.worker import AgentWorker
from agentops.plumbing import queues


@pytest.fixture
def worker(redis_clean):  # type: ignore[no-untyped-def]
    queue = queues.queue()
    worker = AgentWorker([queue], connection=queue.connection, serializer=JSONSerializer)
    worker.register_birth()
    yield worker
    worker.register_death()


def test_a_heartbeat_right_after_one_as_long_is_not_sent_again(worker):
    redis = worker.connection
    worker.heartbeat()
    redis.expire(worker.key, 5)  # tells a heartbeat that was sent from one that was skipped

    worker.heartbeat()
    assert redis.ttl(worker.key) <= 5

    worker.heartbeat(worker.worker_ttl + 600)  # asks for more: sent
    assert redis.ttl(worker.key) > worker.worker_ttl + 60


def test_the_state_is_written_when_it_changes(worker):
    redis = worker.connection
    worker.set_state("idle")
    redis.hdel(worker.key, "state")

    worker.set_state("idle")
    assert redis.hget(worker.key, "state") is None

    worker.set_state("busy")
    assert redis.hget(worker.key, "state") == b"busy"


@pytest.mark.parametrize("given", ["bogus", "default,bogus", " , "])
def test_a_worker_asked_for_a_queue_that_does_not_exist_refuses_naming_the_queues(given):
    with pytest.raises(CommandError) as refused:
        call_command("worker", "--queues", given)

    assert str(refused.value).endswith(f"the queues are {', '.join(queues.KINDS)}")
