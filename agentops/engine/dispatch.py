"""Enqueueing `task_advance` jobs: ids only, on commit, with a deterministic job id.

The job id is `advance-<task>-<last_seq>`: two enqueues for the same task state collapse into one
job, and a job already waiting in the queue is not enqueued again. A duplicate that slips through
is harmless: its claim finds the task leased or not claimable and it returns.
"""

from __future__ import annotations

import logging

import django_rq
from django.db import transaction
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

logger = logging.getLogger(__name__)

WAITING = {JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED}


def job_id_for(task_id: int, token: int) -> str:
    return f"advance-{task_id}-{token}"


def enqueue_now(task_id: int, *, token: int) -> bool:
    """Put a job on the queue unless one for this task state is already waiting."""
    queue = django_rq.get_queue("default")
    job_id = job_id_for(task_id, token)
    try:
        if (
            Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer).get_status(
                refresh=False
            )
            in WAITING
        ):
            return False
    except NoSuchJobError:
        pass
    queue.enqueue(
        "agentops.jobs.task_advance",
        task_id,
        job_id=job_id,
        result_ttl=300,
        failure_ttl=86400,
        job_timeout=3600,
    )
    return True


def task_enqueue(task_id: int, *, token: int) -> None:
    """Enqueue after the current transaction commits (at once when there is none)."""
    transaction.on_commit(lambda: enqueue_now(task_id, token=token))
