"""Prometheus metrics: counters the engine increments, and gauges read from the database.

Counters and histograms live in the processes that do the work (RQ workers, the sweeper, the web
tier) and are summed across processes through prometheus-client's multiprocess mode when
`PROMETHEUS_MULTIPROC_DIR` is set (it must be set, to an empty directory shared by all processes
of a machine, before they start). Engine counters follow committed events only: they are
incremented in `transaction.on_commit`, so a rolled-back checkpoint counts nothing.

Figures that are state rather than flow (tasks by status, gates open, queue depth) are computed
from PostgreSQL and Redis at scrape time by collectors that apps register here, so `agentops`
never imports `reviews`.
"""

from __future__ import annotations

import functools
import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable
from datetime import UTC
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from agentops.engine.costs import token_cost

logger = logging.getLogger(__name__)

# -- flow: incremented where the work happens ----------------------------------------------------

STEPS_STARTED = Counter("agentops_steps_started", "Step attempts started (committed).")
STEPS_COMPLETED = Counter("agentops_steps_completed", "Steps completed (committed).")
STEPS_FAILED = Counter(
    "agentops_steps_failed",
    "Step attempts that failed, by failure layer and kind.",
    ["layer", "kind"],
)
STEP_DURATION = Histogram(
    "agentops_step_duration_seconds",
    "Time spent in one part of a step: the model call, the tool call, or a checkpoint commit.",
    ["part"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
LEASE_TAKEOVERS = Counter(
    "agentops_lease_takeovers", "Claims of a task whose previous holder died while running."
)
EXECUTED_UNKNOWN = Counter(
    "agentops_executed_unknown_calls", "Tool calls recorded as executed_unknown (need a person)."
)
SWEEPER_REDRIVES = Counter("agentops_sweeper_redrives", "Jobs the sweeper enqueued again.")
TOKENS_SPENT = Counter("agentops_model_tokens", "Model tokens spent (prompt + completion).")
COST_SPENT = Counter("agentops_model_cost", "Model cost spent, in the configured currency.")


@functools.cache
def _step_duration(part: str) -> Histogram:
    """The histogram's child for `part` (looked up once: every step observes three; the child
    checks its process id itself, so one made before a fork is still the child's own)."""
    return STEP_DURATION.labels(part=part)


def timed(part: str) -> _Timed:
    """Observe how long the block took as `agentops_step_duration_seconds{part=...}`."""
    return _Timed(part)


class _Timed:
    """The block of `timed` (a class, not a generator's context manager, which costs twice the
    calls: the runner times parts of every step)."""

    __slots__ = ("part", "start")

    def __init__(self, part: str) -> None:
        self.part = part

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        _step_duration(self.part).observe(time.perf_counter() - self.start)


def _count_event(action: str, payload: dict[str, Any]) -> None:
    if action == "agentops.step.started":
        STEPS_STARTED.inc()
    elif action == "agentops.step.completed":
        STEPS_COMPLETED.inc()
    elif action == "agentops.step.failed":
        failure = payload.get("failure") or {}
        STEPS_FAILED.labels(
            layer=str(failure.get("layer") or "unknown"), kind=str(failure.get("kind") or "unknown")
        ).inc()
    elif action == "agentops.ledger.executed_unknown":
        EXECUTED_UNKNOWN.inc()
    elif action == "agentops.task.claimed" and payload.get("recovered"):
        LEASE_TAKEOVERS.inc()
    elif action == "agentops.step.model_result":
        usage = payload.get("usage") or {}
        tokens = int(usage.get("prompt_tokens", 0) or 0) + int(
            usage.get("completion_tokens", 0) or 0
        )
        TOKENS_SPENT.inc(tokens)
        COST_SPENT.inc(float(token_cost(tokens)))


COUNTED = frozenset(
    {
        "agentops.step.started",
        "agentops.step.completed",
        "agentops.step.failed",
        "agentops.ledger.executed_unknown",
        "agentops.task.claimed",
        "agentops.step.model_result",
    }
)


def events_written(events: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """Count the (action, payload) of events appended in the current transaction, once it
    commits. Called by the one function that appends events."""
    counted = [(action, payload) for action, payload in events if action in COUNTED]
    if counted:

        def count() -> None:
            for action, payload in counted:
                _count_event(action, payload)

        transaction.on_commit(count)


def checkpoint_committed(start: float, events: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """A checkpoint's statement succeeded: once it commits (now, when the statement was its
    own transaction), observe its duration from `start` (a `perf_counter` taken as it was
    sent); its events are counted by `events_written`."""
    transaction.on_commit(lambda: _step_duration("checkpoint").observe(time.perf_counter() - start))
    events_written(events)


# -- state: computed at scrape time by collectors apps register ----------------------------------

MetricsSource = Callable[[], Iterable[Metric]]
_sources: dict[str, MetricsSource] = {}


def collector_register(name: str, source: MetricsSource) -> None:
    """Register a function yielding metric families computed at scrape time (idempotent)."""
    _sources[name] = source


class _Sources(Collector):
    def collect(self) -> Iterable[Metric]:
        for name, source in sorted(_sources.items()):
            try:
                yield from source()
            except Exception:  # a failing source must not hide the others; it is logged
                logger.exception("metrics source %s failed", name)


# Importing django_rq.urls (the admin's queue pages) creates django-rq's own Summary, named
# `rq_request_processing_seconds_total`: a summary with a counter's suffix, which Prometheus' own
# linter refuses (promtool check metrics). It times django-rq's stats view, not our work: the
# exposition leaves it out.
FOREIGN_FAMILIES = frozenset({"rq_request_processing_seconds_total"})


class _Without(Collector):
    """The families of `registry` but those in FOREIGN_FAMILIES."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        return (family for family in self.registry.collect() if family.name not in FOREIGN_FAMILIES)


def metrics_exposition() -> bytes:
    """The text exposition: the process counters (summed over every process of the machine in
    multiprocess mode) followed by the database gauges."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        source = CollectorRegistry()
        MultiProcessCollector(source, path=directory)
    else:
        source = REGISTRY
    flows = CollectorRegistry(auto_describe=False)
    flows.register(_Without(source))
    state = CollectorRegistry(auto_describe=False)
    state.register(_Sources())
    return generate_latest(flows) + generate_latest(state)


CONTENT_TYPE = CONTENT_TYPE_LATEST


def token_accepted(authorization: str) -> bool | None:
    """None when no token is configured (the endpoint is off); else whether the request's
    `Authorization: Bearer <token>` header carries it (compared in constant time)."""
    expected = settings.AGENTOPS.get("METRICS_TOKEN") or ""
    if not expected:
        return None
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), expected)


# -- the queue's gauges ---------------------------------------------------------------------------


def queue_metrics() -> Iterable[Metric]:
    from rq.exceptions import NoSuchJobError
    from rq.job import Job

    from agentops.plumbing import queues

    depth = GaugeMetricFamily(
        "agentops_queue_depth", "Jobs waiting in the queue.", labels=["queue"]
    )
    age = GaugeMetricFamily(
        "agentops_queue_oldest_job_age_seconds",
        "Age of the oldest waiting job (0 when the queue is empty).",
        labels=["queue"],
    )
    for kind in queues.KINDS:
        queue = queues.queue(kind)
        depth.add_metric([queue.name], queue.count)
        oldest = 0.0
        for job_id in queue.get_job_ids(0, 0):
            try:
                job = Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer)
            except NoSuchJobError:
                continue
            if job.enqueued_at is not None:
                enqueued = job.enqueued_at
                if enqueued.tzinfo is None:
                    enqueued = enqueued.replace(tzinfo=UTC)
                oldest = max(0.0, (timezone.now() - enqueued).total_seconds())
        age.add_metric([queue.name], oldest)
    yield from (depth, age)
