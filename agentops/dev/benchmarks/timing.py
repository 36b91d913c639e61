"""Timing one page through Django's test client, as the pages bench does for each page: a few
unmeasured warm-up requests, then every request timed as a whole and inside the WSGI handler (what
gunicorn calls per request), with the web process's CPU and the statements it ran."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.test import Client
from django.test.client import ClientHandler

from agentops.dev.benchmarks.wal import StatementCounter

WARMUP = 3


@dataclass(frozen=True)
class PageFigures:
    name: str
    url: str
    role: str
    p50_ms: float
    p95_ms: float
    # The web process's own CPU per request (median): what a busy machine inflates least.
    cpu_p50_ms: float
    # Inside the WSGI handler (what gunicorn calls per request), without the test client's own
    # work around it (building the request's environ, its cookies, reading the response).
    server_p50_ms: float
    server_p95_ms: float
    queries: int
    queries_constant: bool
    bytes: int
    status: int


def _percentile(values: list[float], q: int) -> float:
    """The q-th percentile (inclusive method, as statistics.quantiles computes it)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


class _TimedHandler(ClientHandler):
    """The test client's WSGI handler, each call timed (milliseconds in `ms`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ms: list[float] = []

    def __call__(self, environ: dict[str, Any]) -> Any:
        began = time.perf_counter()
        try:
            return super().__call__(environ)
        finally:
            self.ms.append((time.perf_counter() - began) * 1000)


def measure_page(
    client: Client, *, name: str, url: str, role: str, repeat: int, headers: dict[str, str]
) -> PageFigures:
    handler = client.handler
    client.handler = timed = _TimedHandler(enforce_csrf_checks=handler.enforce_csrf_checks)
    times, cpu, queries = [], [], []
    status, size = 0, 0
    try:
        for _ in range(WARMUP):
            client.get(url, headers=headers)
        timed.ms.clear()
        for _ in range(repeat):
            counter = StatementCounter()
            with connection.execute_wrapper(counter):
                began, began_cpu = time.perf_counter(), time.process_time()
                response = client.get(url, headers=headers)
                times.append((time.perf_counter() - began) * 1000)
                cpu.append((time.process_time() - began_cpu) * 1000)
            queries.append(counter.statements)
            status, size = response.status_code, len(response.content)
    finally:
        client.handler = handler
    return PageFigures(
        name=name,
        url=url,
        role=role,
        p50_ms=round(statistics.median(times), 1),
        p95_ms=round(_percentile(times, 95), 1),
        cpu_p50_ms=round(statistics.median(cpu), 1),
        server_p50_ms=round(statistics.median(timed.ms), 1),
        server_p95_ms=round(_percentile(timed.ms, 95), 1),
        queries=max(queries),
        queries_constant=len(set(queries)) == 1,
        bytes=size,
        status=status,
    )
