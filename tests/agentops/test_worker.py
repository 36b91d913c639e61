"""The worker process: RQ's bookkeeping without the round trips that change nothing."""

from __future__ import annotations

import logging

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from agentops.management.commands.worker import AgentWorker
from agentops.plumbing import queues
from tests.agentops.test_queues import partition_of
from tests.partition import Partition


@pytest.fixture
def worker(redis_clean):  # type: ignore[no-untyped-def]
    # A client of its own: RQ's worker sets its own socket timeout on the client it is given,
    # which must not be this process's queue client (tests/agentops/test_queues.py checks it).
    connection = queues.with_deadline(Redis.from_url(settings.RQ_QUEUES["default"]["URL"]))
    queue = Queue(queues.STEPS, connection=connection, serializer=JSONSerializer)
    worker = AgentWorker([queue], connection=connection, serializer=JSONSerializer)
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


# The partition a job cuts as it returns (the worker runs it in this process).
_silenced: list[Partition] = []


def returns_as_redis_goes_silent() -> str:
    _silenced[0].cut()
    return "done"


def test_a_job_that_returned_is_not_logged_as_failed_when_redis_goes_silent_at_its_end(
    redis_clean, caplog
):
    """The job did its work and returned; RQ's records of its end find Redis silent. The job is
    not taken for one that raised: no ERROR, no failed status, one warning naming it."""
    partition, database = partition_of(settings.RQ_QUEUES["default"]["URL"])
    _silenced[:] = [partition]
    connection = queues.with_deadline(
        Redis(host="127.0.0.1", port=partition.port, db=int(database or 0))
    )
    queue = Queue(queues.STEPS, connection=connection, serializer=JSONSerializer)
    job = queue.enqueue(returns_as_redis_goes_silent)
    worker = AgentWorker([queue], connection=connection, serializer=JSONSerializer)
    execution = worker.prepare_execution(job)
    caplog.set_level(logging.INFO)
    try:
        finished = worker.perform_job(job, queue, execution)
    finally:
        partition.heal()
        partition.close()

    assert finished is True and job.return_value() is None  # its result was never stored
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"job {job.id} (tests.agentops.test_worker.returns_as_redis")
    assert "what the job did is in the database" in warning
    status = Job.fetch(job.id, connection=queues.redis_client(), serializer=JSONSerializer)
    assert status.get_status() != JobStatus.FAILED
