"""Builders the test modules share: a task to run, and the engine run as a worker would.

One module for them, imported by every test module that needs them (the review tests' own
builders, tests/reviews/builders.py, build on these), rather than from one test module another
imports.
"""

from __future__ import annotations

from django.utils import timezone

from agentops.engine.runner import task_advance
from agentops.models import Task
from agentops.services import task_create
from agentops.states import TaskStatus


def refund(**input_overrides) -> Task:
    return task_create(
        agent="refund", goal="Refund order A1001", input={"order_id": "A1001", **input_overrides}
    )


def run_until_parked_or_done(task: Task, *, max_jobs: int = 20) -> Task:
    """Advance like a worker would, making scheduled retries due at once."""
    for _ in range(max_jobs):
        task.refresh_from_db()
        if task.status == TaskStatus.RETRY_SCHEDULED:
            Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now())
        elif task.status not in {TaskStatus.QUEUED, TaskStatus.RUNNING}:
            return task
        task_advance(task_id=task.pk, owner="test")
    task.refresh_from_db()
    return task
