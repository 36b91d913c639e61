"""The unchanged polls of `bench pages`: what a poll that finds nothing new costs.

Each polled page (the inbox rows every 5 s, the task list every 2 s, the live part of a running
task's page every 1 s) is fetched once as htmx fetches it, and its version read from the
fragment's `hx-headers`; then the same poll is timed with that version, as the browser sends it
back while nothing changes. The answer is an empty 204 (agentops.plumbing.web.poll_unchanged); its
bytes here are what the server sends: the status line and headers plus the (empty) body.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.test import Client
from django.urls import reverse

from agentops.models import Task
from agentops.plumbing.web import POLL_VERSION_HEADER
from agentops.states import TaskStatus

_VERSION = re.compile(rb'"X-Poll-Version": "([0-9a-f]+(?:\.[0-9]+)?)"')


def polled_pages() -> list[tuple[str, str]]:
    """The pages that poll, by name and URL; the task page of the running task with most steps
    (a finished task's page no longer polls)."""
    running = (
        Task.objects.filter(status=TaskStatus.RUNNING)
        .order_by("-step_count", "-id")
        .values_list("id", flat=True)
        .first()
    )
    if running is None:
        raise LookupError("the seeded database has no running task")
    return [
        ("inbox", reverse("reviews:inbox")),
        ("task_list", reverse("agentops:task_list")),
        ("task_page", reverse("agentops:task_detail", args=[running])),
    ]


def poll_version_of(client: Client, url: str) -> str:
    """The version the polled fragment at `url` shows now (one htmx request)."""
    found = _VERSION.search(client.get(url, headers={"HX-Request": "true"}).content)
    if found is None:
        raise LookupError(f"{url} shows no poll version")
    return found.group(1).decode()


def unchanged_polls(client: Client, *, measure: Callable[..., Any], repeat: int) -> list[Any]:
    """Time each polled page's unchanged poll as the operator, with `measure` (the pages
    bench's `measure_page`, in benchmarks/timing.py); bytes are the whole response (headers
    included)."""
    figures = []
    for name, url in polled_pages():
        headers = {"HX-Request": "true", POLL_VERSION_HEADER: poll_version_of(client, url)}
        page = measure(client, name=name, url=url, role="operator", repeat=repeat, headers=headers)
        response = client.get(url, headers=headers)
        wire = len(response.serialize_headers()) + len(response.content)
        figures.append(replace(page, bytes=wire))
    return figures


def server_times(page: dict[str, Any]) -> str:
    """A page's time inside the WSGI handler, p50/p95 in ms."""
    return f"{page['server_p50_ms']}/{page['server_p95_ms']}"


def unchanged_polls_lines(report: dict[str, Any]) -> list[str]:
    """The unchanged polls' rows of the pages table."""
    lines = ["  unchanged polls (204, no render; bytes: headers and body):"]
    for name, page in report.get("unchanged_polls", {}).items():
        constant = "" if page["queries_constant"] else " (varies)"
        lines.append(
            f"  {name:<12} {page['p50_ms']:>8} {page['p95_ms']:>8} {page['cpu_p50_ms']:>8}"
            f" {page['queries']:>8} {page['bytes']:>9} {server_times(page):>18}{constant}"
        )
    return lines
