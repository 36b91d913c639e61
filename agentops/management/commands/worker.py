from __future__ import annotations

import time
from typing import Any

import django_rq
from django.core.management.base import BaseCommand
from django.db import close_old_connections
from rq.serializers import JSONSerializer
from rq.worker import SimpleWorker

from agentops.engine.heap import heap_keep_freed

# A worker heartbeat this recent, that set at least the TTL asked for, makes another redundant.
HEARTBEAT_REDUNDANT_SECONDS = 1.0


class AgentWorker(SimpleWorker):
    """Runs jobs in-process (no fork per job): the DB connection and imports stay warm.

    A crash kills the whole worker, which the sweeper and the lease expiry recover from.

    RQ sends its worker heartbeat (three commands) three more times per job, around the dequeue
    and after the job, microseconds after the heartbeats it sends with the suspension check and
    the job's start; and it writes the `idle` state twice in a row. Those repeats are skipped,
    and a heartbeat that is sent goes as one pipeline: about half of a job's Redis round trips.
    """

    _beat: tuple[float, int] | None = None

    def execute_job(self, job: Any, queue: Any) -> bool:
        close_old_connections()
        try:
            return super().execute_job(job, queue)
        finally:
            close_old_connections()

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        ttl = timeout or self.worker_ttl + 60
        now = time.monotonic()
        if pipeline is not None:
            super().heartbeat(timeout, pipeline=pipeline)
        elif self._beat_covers(ttl, now):
            return
        else:
            with self.connection.pipeline() as beat:
                super().heartbeat(timeout, pipeline=beat)
                beat.execute()
        self._beat = (now, ttl)

    def _beat_covers(self, ttl: int, now: float) -> bool:
        if self._beat is None:
            return False
        sent_at, sent_ttl = self._beat
        return now - sent_at < HEARTBEAT_REDUNDANT_SECONDS and sent_ttl >= ttl

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if pipeline is None and state == self.get_state():
            return  # already written: only this worker writes its state
        super().set_state(state, pipeline=pipeline)


class Command(BaseCommand):
    help = "Run an RQ worker that advances tasks (JSON serializer, ids-only jobs)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
        parser.add_argument("--name", default=None)

    def handle(self, *args, burst: bool, name: str | None, **options) -> None:
        heap_keep_freed()
        queue = django_rq.get_queue("default")
        worker = AgentWorker(
            [queue], connection=queue.connection, serializer=JSONSerializer, name=name
        )
        worker.work(burst=burst, with_scheduler=False, logging_level="WARNING")
