"""The simulated services in the test's own process: the same HTTP client, the same views.

A test that kills no process does not need the simulated services in a process of their own:
`InProcessSim` is an httpx transport that hands each request to the simulated services' views
(their URLconf and their middleware, from `agentops.dev.sim_settings`) through Django's test
request handler, on the test's own database connection. Their rows are then written in the
test's transaction, so such a test is rollback-isolated instead of truncating every table.

What a socket adds is kept where it shows: a view that sleeps past the client's read timeout (a
`timeout_before`, `execute_then_timeout` or `slow` fault) sleeps only as long as that timeout and
the client gets `httpx.ReadTimeout`, as it would from the real server (which goes on, unheard).
The crash, chaos, outage and browser tiers keep the real server (`sim_server` in conftest).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponse
from django.test import override_settings
from django.test.client import ClientHandler, RequestFactory

from agentops.dev import sim_settings
from agentops.dev.sim import views as sim_views

BASE_URL = "http://sim.in-process/sim"


class _SimHandler(ClientHandler):
    """Django's test request handler with the simulated services' middleware and URLconf."""

    def load_middleware(self, is_async: bool = False) -> None:
        with override_settings(MIDDLEWARE=sim_settings.MIDDLEWARE):
            super().load_middleware(is_async)

    def get_response(self, request: WSGIRequest) -> HttpResponse:
        request.urlconf = sim_settings.ROOT_URLCONF
        return super().get_response(request)


class _CappedClock:
    """`time` for the views, whose `sleep` stops at the client's read timeout and notes that the
    client gave up (everything else is the real module's)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @contextmanager
    def reading(self, timeout: float | None) -> Iterator[list[bool]]:
        gave_up: list[bool] = []
        self.local.read = (timeout, gave_up)
        try:
            yield gave_up
        finally:
            self.local.read = None

    def sleep(self, seconds: float) -> None:
        read = getattr(self.local, "read", None)
        if read is None or read[0] is None or seconds <= read[0]:
            time.sleep(seconds)
            return
        time.sleep(read[0])
        read[1].append(True)


class InProcessSim(httpx.BaseTransport):
    """An httpx transport that answers from the simulated services' views in this process."""

    clock = _CappedClock()

    def __init__(self) -> None:
        self.handler = _SimHandler(enforce_csrf_checks=False)
        self.factory = RequestFactory()
        sim_views.time = self.clock  # type: ignore[assignment]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        headers = {
            key: value
            for key, value in request.headers.items()
            if key.lower() not in {"host", "content-length", "content-type"}
        }
        django_request = self.factory.generic(
            request.method,
            request.url.raw_path.decode("ascii"),
            data=body,
            content_type=request.headers.get("content-type", "application/octet-stream"),
            headers=headers,
        )
        timeout = (request.extensions.get("timeout") or {}).get("read")
        with self.clock.reading(timeout) as gave_up:
            response = self.handler(django_request.environ)
        if gave_up:
            raise httpx.ReadTimeout("timed out (in-process simulated services)", request=request)
        return httpx.Response(
            response.status_code,
            headers=list(response.items()),
            content=response.content,
            request=request,
        )


def sim_client(timeout: float) -> httpx.Client:
    """What `agentops.engine.runner.http_client` returns while a test uses the in-process sim."""
    return httpx.Client(transport=InProcessSim(), timeout=timeout)
