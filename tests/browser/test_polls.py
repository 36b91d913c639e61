"""Polls in a real Chromium: while nothing changes the polled inbox rows and the live task page
get empty 204 answers (and stay as they are); a change shows within one poll interval."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, Response, expect

from agentops.engine import task_create, task_pause, task_resume
from agentops.engine.transitions import task_claim
from tests.browser.conftest import login
from tests.reviews.builders import gated_refund, open_gate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A poll interval plus the slack of a loaded machine (the request, the swap).
SLACK_MS = 2_500


def poll_statuses(page: Page, path: str) -> list[int]:
    """The statuses of the htmx polls of `path` this page makes from now on."""
    seen: list[int] = []

    def note(response: Response) -> None:
        request = response.request
        if request.headers.get("hx-request") and response.url.split("?")[0].endswith(path):
            seen.append(response.status)

    page.on("response", note)
    return seen


def test_the_inbox_polls_204_while_nothing_changes_and_shows_a_new_gate_within_a_poll(
    page: Page, live_server: Any, sim_server: str, redis_clean: None, operator: Any, starter: Any
):
    login(page, live_server, "olga")
    page.goto(f"{live_server.url}/review/")
    expect(page.locator("#inbox-rows")).to_contain_text("Nothing waits for a person right now.")
    statuses = poll_statuses(page, "/review/")

    page.wait_for_timeout(11_000)  # two polls at 5 s
    assert statuses and set(statuses) == {204}, statuses
    expect(page.locator("#inbox-rows")).to_contain_text("Nothing waits for a person right now.")

    gate = open_gate(gated_refund(created_by=starter))

    expect(page.locator(f"#gate-{gate.pk}")).to_be_visible(timeout=5_000 + SLACK_MS)
    assert statuses[-1] == 200, statuses


def test_the_task_page_polls_204_while_nothing_changes_and_shows_a_change_within_a_poll(
    page: Page, live_server: Any, operator: Any, starter: Any
):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    task_pause(task_id=task.pk, actor=starter, reason="checking")
    login(page, live_server, "olga")
    page.goto(f"{live_server.url}/tasks/{task.pk}")
    badge = page.locator("#task-live dl.summary dd").first.locator(".badge")
    expect(badge).to_have_class(re.compile(r"\bbadge-paused\b"))
    path = f"/tasks/{task.pk}"
    statuses = poll_statuses(page, path)

    page.wait_for_timeout(3_500)  # three polls at 1 s
    assert statuses and set(statuses) == {204}, statuses

    task_resume(task_id=task.pk, actor=starter)
    assert task_claim(task_id=task.pk, owner="test") is not None

    expect(badge).to_have_class(re.compile(r"\bbadge-running\b"), timeout=1_000 + SLACK_MS)
