"""RQ entry points. A job carries a task id and nothing else; the runner does the work.

The job's meta may carry the id of the request that enqueued it: the job's log lines carry it
too, and each job ends with one line saying what it did. It may carry that request's trace
context too: the slice's span links to it (`agentops.plumbing.tracing`).
"""

from __future__ import annotations

import logging

from rq import get_current_job

from agentops.plumbing.identity import process_identity
from agentops.plumbing.logs import job_request_context
from agentops.plumbing.tracing import TRACEPARENT

logger = logging.getLogger(__name__)


def task_advance(task_id: int) -> str:
    """Advance the task for one time slice. A no-op when the task is leased, parked or done."""
    from agentops.engine.runner import task_advance as advance

    job = get_current_job()
    owner = f"{process_identity()}:{job.id if job else '-'}"
    with job_request_context():
        enqueued_by = job.meta.get(TRACEPARENT) if job else None
        outcome = advance(
            task_id=int(task_id),
            owner=owner,
            enqueued_by=enqueued_by if isinstance(enqueued_by, str) else None,
        )
        logger.info("job %s: %s", job.id if job else "-", outcome, extra={"task_id": task_id})
    return outcome
