"""`manage.py worker`: an RQ worker that advances tasks, and outlives PostgreSQL and Redis outages.

A worker that loses Redis waits for it (capped backoff, agentops.plumbing.outages) wherever RQ's
loop would have raised and quit, then goes on with the same identity. A job that failed because
PostgreSQL went away leaves its task to the sweeper (its lease lapses, or its job is found lost),
and the worker waits for the database before it takes the next job, instead of failing every job in
the queue meanwhile.

With `--tasks N` (AGENTOPS_WORKER_TASKS) a worker advances up to N tasks at once, one job per
thread, so one process keeps N model calls in flight where it kept one: a job's thread holds one
of the process's database slots (AGENTOPS_WORKER_DB_SLOTS) except while it waits on a model or a
tool (agentops.plumbing.slots). A SIGKILL ends all N jobs at once; each task's lease lapses and the
sweeper re-drives it, as for a worker with one. docs/scaling.md, "Many slow calls at once".
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import django_rq
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections, connection
from rq.serializers import JSONSerializer
from rq.timeouts import TimerDeathPenalty
from rq.worker import SimpleWorker

from agentops.engine.entrypoints import agent_packages_log
from agentops.engine.heap import heap_keep_freed, heap_startup_frozen
from agentops.plumbing import queues
from agentops.plumbing.identity import process_identity
from agentops.plumbing.outages import (
    POSTGRESQL,
    REDIS,
    REDIS_ERRORS,
    Outage,
    database_answers,
    wait_until,
)
from agentops.plumbing.postgres import limits_checked_at_start
from agentops.plumbing.slots import NoSlotFree, database_slot, worker_slots_install

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The command channel's thread tries again this long after losing Redis (as RQ does).
PUBSUB_RETRY_SECONDS = 2.0
# RQ waits on the queue for its worker TTL less 15 s, and reads on its connection with a timeout
# 10 s longer than that wait: with RQ's default TTL (420 s) a Redis that stops answering without
# closing the connection (a partition, a frozen server) held a worker for 415 s. With 30 s, it
# waits 15 s on the queue and gives up a read after 25 s; with RQ's wait before it tries again
# (at most RECONNECT_MAX_SECONDS, 5 s), a worker takes jobs again within 30 s of Redis answering.
WORKER_TTL_SECONDS = 30
# A worker heartbeat this recent, that set at least the TTL asked for, makes another redundant.
HEARTBEAT_REDUNDANT_SECONDS = 1.0
# A worker whose threads are all busy sends its heartbeat this often while it waits for one.
THREADS_WAIT_SECONDS = 5.0


class TaskThreads:
    """The threads a worker advances tasks on: at most `size` jobs at once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pool = ThreadPoolExecutor(size, thread_name_prefix="task")
        self.running = 0
        self.finished = 0
        self.changed = threading.Condition()

    def start(self, job: Callable[[], None]) -> None:
        with self.changed:
            self.running += 1
        self.pool.submit(self._run, job)

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:
            logger.exception("a job's thread raised")
        finally:
            with self.changed:
                self.running -= 1
                self.finished += 1
                self.changed.notify_all()

    def wait(self, until: Callable[[], bool], beat: Callable[[], None]) -> None:
        """Wait until `until()` holds (read under the lock), calling `beat` every
        THREADS_WAIT_SECONDS meanwhile (outside the lock: finishing threads take it)."""
        while True:
            with self.changed:
                if until() or self.changed.wait_for(until, THREADS_WAIT_SECONDS):
                    return
            beat()


class AgentWorker(SimpleWorker):
    """Runs jobs in-process (no fork per job): the DB connection and imports stay warm.

    A crash kills the whole worker, which the sweeper and the lease expiry recover from.

    RQ sends its worker heartbeat (three commands) three more times per job, around the dequeue
    and after the job, microseconds after the heartbeats it sends with the suspension check and
    the job's start; and it writes the `idle` state twice in a row. Those repeats are skipped,
    and a heartbeat that is sent goes as one pipeline: about half of a job's Redis round trips.
    """

    _beat: tuple[float, int] | None = None

    def __init__(self, *args: Any, tasks: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # RQ's own waits between tries on the queue double up to 60 s; ours stop at the cap
        # every other reconnect has.
        self.max_connection_wait_time = settings.AGENTOPS["RECONNECT_MAX_SECONDS"]
        self.redis_outage = Outage(REDIS)
        self.database_outage = Outage(POSTGRESQL)
        self._ends_lost: set[str] = set()  # the jobs whose end Redis did not take
        self.threads = TaskThreads(tasks) if tasks > 1 else None
        if self.threads is not None:
            # RQ's default job timeout is a SIGALRM, which only the main thread receives.
            self.death_penalty_class = TimerDeathPenalty

    # -- several tasks at once -----------------------------------------------------------------

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> Any:
        """With threads: take a job only when a thread is free to run it (the queue keeps it for
        other workers meanwhile). In burst mode an empty queue ends the worker only once its
        threads are done too: a task's next slice is enqueued by the job that ends this one."""
        threads = self.threads
        if threads is None:
            return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        while True:
            threads.wait(lambda: threads.running < threads.size, self.heartbeat)
            finished = threads.finished
            result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            if result is not None or timeout is not None:
                return result
            with threads.changed:
                if threads.running == 0 and threads.finished == finished:
                    return None
            threads.wait(functools.partial(_finished_since, threads, finished), self.heartbeat)

    def execute_job(self, job: Any, queue: Any) -> None:
        if self.threads is None:
            self._job_run(lambda: super(AgentWorker, self).execute_job(job, queue))
            return
        execution = self.prepare_execution(job)
        self.threads.start(lambda: self._job_threaded(job, queue, execution))

    def _job_threaded(self, job: Any, queue: Any, execution: Any) -> None:
        try:
            with database_slot():
                self._job_run(lambda: self.perform_job(job, queue, execution))
        except NoSlotFree:
            # Not run: the started registry keeps the job until RQ's maintenance clears it, and
            # the sweeper re-drives its task.
            logger.warning("job %s: no database slot came free; not run", job.id)

    def teardown(self) -> None:
        if self.threads is not None:
            self.threads.pool.shutdown(wait=True)  # the tasks in flight end their slices
        super().teardown()  # type: ignore[no-untyped-call]  # rq leaves it unannotated

    # -- one job ----------------------------------------------------------------------------------

    def _job_run(self, perform: Callable[[], object]) -> None:
        close_old_connections()
        try:
            perform()
        except REDIS_ERRORS as error:
            # RQ could not record the job's end: that record is lost, the task's state is not (it
            # is in PostgreSQL), and the sweeper re-drives the task if the job did not finish it.
            self._wait_for_redis(error)
        finally:
            database_lost = _database_lost()
            close_old_connections()
        if database_lost:
            wait_until(database_answers, self.database_outage)

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        ttl = timeout or self.worker_ttl + 60
        now = time.monotonic()
        if pipeline is not None:
            super().heartbeat(timeout, pipeline=pipeline)
        elif self._beat_covers(ttl, now):
            return
        else:
            self._through_outage(lambda: self._send_heartbeat(timeout))
        self._beat = (now, ttl)

    def _send_heartbeat(self, timeout: int | None) -> None:
        with self.connection.pipeline() as beat:
            super().heartbeat(timeout, pipeline=beat)
            beat.execute()

    def _beat_covers(self, ttl: int, now: float) -> bool:
        if self._beat is None:
            return False
        sent_at, sent_ttl = self._beat
        return now - sent_at < HEARTBEAT_REDUNDANT_SECONDS and sent_ttl >= ttl

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if pipeline is None and state == self.get_state():
            return  # already written: only this worker writes its state
        if pipeline is not None:
            super().set_state(state, pipeline=pipeline)
        else:
            self._through_outage(lambda: super(AgentWorker, self).set_state(state))

    # RQ's work loop quits on a Redis error raised outside its dequeue (the suspension check, the
    # registry maintenance, the state and heartbeat writes above): each waits for Redis instead.

    def check_for_suspension(self, burst: bool) -> None:
        self._through_outage(lambda: super(AgentWorker, self).check_for_suspension(burst))

    def run_maintenance_tasks(self) -> None:
        self._through_outage(super().run_maintenance_tasks)

    # A job that returned has done its work, and the task's state is in PostgreSQL. RQ's records
    # of the job's end (the execution, the result, the registries) are Redis writes made after
    # it; when Redis drops there, RQ took the job for one that raised and logged it as failed,
    # with an ERROR and a traceback. The records are given up with one warning instead: the job
    # stays in the started registry until RQ's maintenance clears it.

    def handle_execution_ended(self, job: Any, queue: Any, timeout: Any) -> None:
        self._end_recorded(
            job, lambda: super(AgentWorker, self).handle_execution_ended(job, queue, timeout)
        )

    def handle_job_success(
        self, job: Any, queue: Any, started_job_registry: Any, execution: Any
    ) -> None:
        self._end_recorded(
            job,
            lambda: super(AgentWorker, self).handle_job_success(
                job, queue, started_job_registry, execution
            ),
        )

    def _end_recorded(self, job: Any, record: Callable[[], None]) -> None:
        if job.id in self._ends_lost:
            self._ends_lost.discard(job.id)
            return  # Redis dropped at this job's end already: no second wait for it
        try:
            record()
        except REDIS_ERRORS as error:
            self._ends_lost.add(job.id)
            logger.warning(
                "job %s (%s) ended; Redis did not take RQ's record of its end (%s): what the "
                "job did is in the database",
                job.id,
                job.func_name,
                type(error).__name__,
            )

    def _pubsub_exception_handler(self, exc: Exception, pubsub: Any, pubsub_thread: Any) -> None:
        # The command channel's thread (stop a job, shut down) reconnects by itself; RQ logs an
        # error for each of its tries, 2 s apart. The main loop logs the outage: this one waits.
        if isinstance(exc, REDIS_ERRORS):
            time.sleep(PUBSUB_RETRY_SECONDS)
        else:
            super()._pubsub_exception_handler(exc, pubsub, pubsub_thread)

    def _through_outage(self, action: Callable[[], T]) -> T:
        """`action()`, tried again after Redis is back each time it finds Redis away. For writes
        that are the same when repeated (a state, a heartbeat) and reads."""
        while True:
            try:
                return action()
            except REDIS_ERRORS as error:
                self._wait_for_redis(error)

    def _wait_for_redis(self, error: Exception) -> None:
        wait_until(self._rejoin, self.redis_outage, first_error=error)

    def _rejoin(self) -> None:
        """Raises while Redis is away. Once it answers, and if it came back empty (restarted
        without its data), list this worker among the workers again, as RQ does at start."""
        if not self.connection.exists(self.key):
            self.register_birth()  # type: ignore[no-untyped-call]  # rq leaves it unannotated


def _finished_since(threads: TaskThreads, seen: int) -> bool:
    return threads.finished > seen


def _database_lost() -> bool:
    """After a job: its database connection broke (PostgreSQL restarted or went away). Asks the
    server only when the job hit a database error."""
    return connection.errors_occurred and not connection.is_usable()


class Command(BaseCommand):
    help = "Run an RQ worker that advances tasks (JSON serializer, ids-only jobs)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
        parser.add_argument("--name", default=None)
        parser.add_argument(
            "--tasks",
            type=int,
            default=settings.AGENTOPS["WORKER_TASKS"],
            help="tasks advanced at once, one thread each (default AGENTOPS_WORKER_TASKS, 1)",
        )
        parser.add_argument(
            "--queues",
            dest="queue_names",
            default=queues.STEPS,
            help=f"comma-separated, in the order taken: {', '.join(queues.KINDS)} "
            f"(steps' jobs are on {queues.STEPS}, notices' on {queues.NOTICES})",
        )

    def handle(
        self,
        *args: object,
        burst: bool,
        name: str | None,
        queue_names: str,
        tasks: int,
        **options: object,
    ) -> None:
        names = [item.strip() for item in queue_names.split(",") if item.strip()]
        unknown = sorted(set(names) - set(queues.KINDS))
        if unknown or not names:
            raise CommandError(
                f"--queues: {', '.join(unknown) or 'none given'}; the queues are "
                f"{', '.join(queues.KINDS)}"
            )
        if tasks < 1:
            raise CommandError(f"--tasks: at least 1, not {tasks}")
        if tasks > 1:
            # A task that waits longer than its lease for a slot has lost the task anyway.
            worker_slots_install(
                min(tasks, settings.AGENTOPS["WORKER_DB_SLOTS"]),
                settings.AGENTOPS["LEASE_SECONDS"],
            )
        limits_checked_at_start()
        heap_keep_freed()
        agent_packages_log()
        # A client of its own (the jobs enqueue on the process's, bound by 2 s): rq raises its
        # read timeout to the dequeue's wait plus 10 s; a connect gives up after 2 s.
        redis_connection = queues.with_deadline(django_rq.get_connection(queues.STEPS))
        taken = [django_rq.get_queue(each, connection=redis_connection) for each in names]
        worker = AgentWorker(
            taken,
            connection=redis_connection,
            serializer=JSONSerializer,
            name=name,
            worker_ttl=WORKER_TTL_SECONDS,
            tasks=tasks,
        )
        # The name its leases and claims carry, unique across hosts (plumbing.identity).
        logger.info(
            "worker %s takes the queues %s, %d task%s at once",
            process_identity(),
            ", ".join(names),
            tasks,
            "" if tasks == 1 else "s",
        )
        heap_startup_frozen()
        worker.work(burst=burst, with_scheduler=False, logging_level="WARNING")
