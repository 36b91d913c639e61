"""The sweeper re-drives tasks nobody is advancing.

A claimable task (queued, running, or a due retry) whose lease is free and that has sat longer than
the grace period gets a job, unless a job for its current state is already waiting. This covers a
worker killed mid-slice (its lease expires), a job lost with Redis, and a retry whose time has come.
Overdue approval gates take their policy's timeout action (reject, or escalate once).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from agentops.engine import review_bridge
from agentops.engine.dispatch import enqueue_now
from agentops.models import Task
from agentops.states import TaskStatus

logger = logging.getLogger(__name__)


def tasks_to_redrive() -> list[tuple[int, int]]:
    grace = timezone.now() - timedelta(seconds=settings.AGENTOPS["SWEEP_GRACE_SECONDS"])
    lease_free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now())
    stale_queued = Q(status=TaskStatus.QUEUED, updated_at__lt=grace)
    crashed = Q(status=TaskStatus.RUNNING)
    due_retry = Q(status=TaskStatus.RETRY_SCHEDULED, next_run_at__lte=Now())
    return list(
        Task.objects.filter(lease_free)
        .filter(stale_queued | crashed | due_retry)
        .order_by("id")
        .values_list("id", "last_seq")
    )


def sweep() -> int:
    """Expire overdue gates, escalate stopped tasks past their SLA, then enqueue a job for every
    task to re-drive; returns how many jobs were enqueued."""
    review_bridge.gates_expire_overdue()
    review_bridge.stopped_tasks_escalate_overdue()
    enqueued = 0
    for task_id, seq in tasks_to_redrive():
        if enqueue_now(task_id, token=seq):
            enqueued += 1
            logger.info("sweeper: re-driving task %s", task_id)
    return enqueued
