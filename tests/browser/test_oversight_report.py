"""The oversight report's page in a real Chromium: axe-clean on screen, and printed without its
navigation, filters and links (print CSS), the sections and what they evidence kept."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from agentops.engine import task_create
from reviews.services import task_control_apply
from tests.browser.axe import axe_preloaded, axe_violations, described
from tests.browser.conftest import ACTION_TIMEOUT_MS, VIEWPORT, csp_watched, login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_oversight_report_reads_on_screen_and_prints_without_the_pages_chrome(
    chromium: Browser, live_server: Any, operator: Any
):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    task_control_apply(task_id=task.pk, action="pause", actor=operator, reason="a look")
    context = axe_preloaded(chromium.new_context(viewport=VIEWPORT, base_url=live_server.url))
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    blocked = csp_watched(context)
    page = context.new_page()
    try:
        login(page, live_server, "olga")
        page.goto("/review/oversight")
        agent = page.get_by_role("region", name="Agent refund")
        expect(agent).to_contain_text("Stops and anomalies")
        expect(agent).to_contain_text("Art. 14(4)(e)")
        expect(agent.get_by_role("row", name="task_pauses")).to_contain_text("1")
        found = described(axe_violations(page))
        expect(page.get_by_role("link", name="CSV")).to_be_visible()
        # It fits a phone (its wide tables scroll in their box).
        page.set_viewport_size({"width": 390, "height": 800})
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        page.set_viewport_size(VIEWPORT)

        page.emulate_media(media="print")
        expect(page.get_by_role("navigation", name="Main")).to_be_hidden()
        expect(page.get_by_role("button", name="Show")).to_be_hidden()
        expect(page.get_by_role("link", name="CSV")).to_be_hidden()
        expect(agent).to_be_visible()
        expect(agent).to_contain_text("Art. 12")
    finally:
        context.close()
    assert not found, "\n".join(found)
    assert blocked == [], f"the Content-Security-Policy blocked: {blocked}"
