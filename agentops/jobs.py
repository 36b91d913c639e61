"""RQ entry points. A job carries a task id and nothing else; the runner does the work."""

from __future__ import annotations

import os
import socket

from rq import get_current_job


def task_advance(task_id: int) -> str:
    """Advance the task for one time slice. A no-op when the task is leased, parked or done."""
    from agentops.engine.runner import task_advance as advance

    job = get_current_job()
    owner = f"{socket.gethostname()}:{os.getpid()}:{job.id if job else '-'}"
    return advance(task_id=int(task_id), owner=owner)
