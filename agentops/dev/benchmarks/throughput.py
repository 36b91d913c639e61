"""`manage.py bench throughput`: steps per second that N real worker processes sustain.

Creates `tasks` tasks of the no-op bench agent (one model call and one in-process tool call per
step), starts `workers` burst workers (`manage.py worker --burst`) against the same PostgreSQL
and Redis, and measures from the first task's start to the last task's finish as the database
recorded them (so worker start-up is left out). This is the engine's ceiling on this machine:
real agents spend most of their time waiting on models and tools, and a worker waiting holds no
database connection busy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import django_rq
from django.conf import settings
from django.db import connection
from django.db.models import Max, Min
from rq.worker import Worker

from agentops.dburl import database_url
from agentops.dev.benchmarks.tasks import bench_tasks_delete
from agentops.models import Task
from agentops.services import task_create
from agentops.states import TaskStatus

AGENT = "bench_noop"


def throughput(*, workers: int, tasks: int, steps: int, payload_kb: int) -> dict[str, Any]:
    queue = django_rq.get_queue("default")
    if queue.count or Worker.count(queue=queue):
        return {"benchmark": "throughput", "note": "skipped: the queue has jobs or a worker"}
    created = [
        task_create(
            agent=AGENT,
            goal="bench throughput",
            input={"steps": steps, "payload_kb": payload_kb},
        ).pk
        for _ in range(tasks)
    ]
    try:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(connection.settings_dict),
            "REDIS_URL": settings.RQ_QUEUES["default"]["URL"],
        }
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        children = [
            subprocess.Popen([sys.executable, manage, "worker", "--burst"], env=env)
            for _ in range(workers)
        ]
        for child in children:
            child.wait(timeout=3600)
        done = Task.objects.filter(pk__in=created)
        succeeded = done.filter(status=TaskStatus.SUCCEEDED).count()
        span = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
        seconds = (span["last"] - span["first"]).total_seconds()
    finally:
        bench_tasks_delete(created)
    return {
        "benchmark": "throughput",
        "workers": workers,
        "tasks": tasks,
        "tasks_succeeded": succeeded,
        "steps_per_task": steps,
        "payload_kb": payload_kb,
        "seconds": round(seconds, 3),
        "steps_per_second": round(succeeded * steps / seconds, 1) if seconds else None,
    }
