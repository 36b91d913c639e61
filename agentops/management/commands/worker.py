from __future__ import annotations

from typing import Any

import django_rq
from django.core.management.base import BaseCommand
from django.db import close_old_connections
from rq.serializers import JSONSerializer
from rq.worker import SimpleWorker


class AgentWorker(SimpleWorker):
    """Runs jobs in-process (no fork per job): the DB connection and imports stay warm.

    A crash kills the whole worker, which the sweeper and the lease expiry recover from.
    """

    def execute_job(self, job: Any, queue: Any) -> bool:
        close_old_connections()
        try:
            return super().execute_job(job, queue)
        finally:
            close_old_connections()


class Command(BaseCommand):
    help = "Run an RQ worker that advances tasks (JSON serializer, ids-only jobs)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
        parser.add_argument("--name", default=None)

    def handle(self, *args, burst: bool, name: str | None, **options) -> None:
        queue = django_rq.get_queue("default")
        worker = AgentWorker(
            [queue], connection=queue.connection, serializer=JSONSerializer, name=name
        )
        worker.work(burst=burst, with_scheduler=False, logging_level="WARNING")
