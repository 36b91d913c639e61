"""Enqueueing `task_advance` jobs: ids only, on commit, with a deterministic job id.

The job id is `advance-<task>-<last_seq>`: two enqueues for the same task state collapse into one
job, and a job already waiting in the queue is not enqueued again. A duplicate that slips through
is harmless: its claim finds the task leased or not claimable and it returns. The job's meta
carries the id of the request that enqueued it (an id, for the worker's log lines) and its
trace context (the worker's slice links to it: `agentops.plumbing.tracing`).
"""

from __future__ import annotations

import logging

from django.db import transaction
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.queue import Queue

from agentops.plumbing import queues, tracing
from agentops.plumbing.logs import job_meta
from agentops.plumbing.outages import REDIS_ERRORS

logger = logging.getLogger(__name__)


def job_id_for(task_id: int, token: int) -> str:
    return f"advance-{task_id}-{token}"


def job_waiting(queue: Queue, job_id: str) -> bool:
    """True when the job is queued and really in the queue's list."""
    try:
        job = Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer)
    except NoSuchJobError:
        return False
    return (
        job.get_status(refresh=False) == JobStatus.QUEUED
        and queue.get_job_position(job_id) is not None
    )


def enqueue_now(task_id: int, *, token: int) -> bool:
    """Put a job on the queue unless one for this task state is really waiting in it.

    A job whose record says `queued` but which is in no queue was popped by a worker that died
    before it marked the job started (found by `manage.py chaos`): it is enqueued again.
    """
    queue = queues.queue()
    job_id = job_id_for(task_id, token)
    if job_waiting(queue, job_id):
        return False
    queue.enqueue(
        "agentops.jobs.task_advance",
        task_id,
        job_id=job_id,
        meta={**job_meta(), **tracing.job_meta()},
        result_ttl=300,
        failure_ttl=86400,
        job_timeout=3600,
    )
    return True


def task_enqueue(task_id: int, *, token: int) -> None:
    """Enqueue after the current transaction commits (at once when there is none)."""
    transaction.on_commit(lambda: _enqueue_committed(task_id, token))


def _enqueue_committed(task_id: int, token: int) -> None:
    """The task's state is committed: when Redis is away or does not answer within the queue's
    deadline, say so and leave the job to the sweeper, which enqueues a claimable task that sat
    past its grace (engine/sweeper.py). The person's request, or the worker's job, goes on."""
    try:
        enqueue_now(task_id, token=token)
    except REDIS_ERRORS as error:
        logger.warning(
            "task %s: not enqueued (%s: %s); the sweeper will enqueue it",
            task_id,
            type(error).__name__,
            error,
        )
