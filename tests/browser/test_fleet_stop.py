"""The fleet's stop button in a real Chromium, by keyboard: a holder of the permission stops every
refund, every page says so, and the holder resumes them; the page is axe-clean with and without
a stop in force, and nothing breaks the Content-Security-Policy."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from playwright.sync_api import Browser, Page, expect

from agentops.engine import task_create
from agentops.models import Event, FleetStop, Task
from agentops.states import TaskStatus
from reviews.models import Decision
from tests.browser.axe import axe_preloaded, axe_violations, described
from tests.browser.conftest import ACTION_TIMEOUT_MS, VIEWPORT, csp_watched, login, shoot
from tests.reviews.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stopper(roles: None, django_user_model: Any) -> Any:
    user = make_user(django_user_model, "stella", "operators")
    user.user_permissions.add(Permission.objects.get(codename="stop_fleet"))
    return user


def focus_and_submit(page: Page, button: str) -> None:
    """Tab from the last field to `button` and press Enter on it, as a keyboard user does."""
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name=button)).to_be_focused()
    page.keyboard.press("Enter")


def test_a_holder_stops_every_refund_by_keyboard_every_page_says_so_and_resumes_them(
    chromium: Browser, live_server: Any, stopper: Any, operator: Any
):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    context = axe_preloaded(chromium.new_context(viewport=VIEWPORT, base_url=live_server.url))
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    blocked = csp_watched(context)
    page = context.new_page()
    found: list[str] = []
    try:
        login(page, live_server, "stella")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Stops").click()
        expect(page.get_by_role("heading", name="Stop the fleet")).to_be_visible()
        expect(page.get_by_text("No stop is in force")).to_be_visible()
        found.extend(described(axe_violations(page)))

        what = page.get_by_label("What to stop")
        what.focus()
        what.select_option("agent:refund")
        page.keyboard.press("Tab")
        expect(page.get_by_label("Reason", exact=True)).to_be_focused()
        page.keyboard.type("Refunds go to the wrong accounts")
        focus_and_submit(page, "Stop")

        banner = page.get_by_role("status").filter(has_text="A stop is in force")
        expect(banner).to_contain_text("Every task of agent refund")
        expect(banner).to_contain_text("Refunds go to the wrong accounts")
        expect(page.get_by_text("1 tasks paused")).to_be_visible()
        shoot(page, "fleet-stop")
        found.extend(described(axe_violations(page)))
        # Banner and page fit a phone.
        page.set_viewport_size({"width": 390, "height": 800})
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        page.set_viewport_size(VIEWPORT)
        assert Task.objects.get(pk=task.pk).status == TaskStatus.PAUSED

        # Every page says so, to anyone signed in.
        page.goto(f"/tasks/{task.pk}")
        expect(banner).to_contain_text("Every task of agent refund")
        found.extend(described(axe_violations(page)))

        page.goto("/review/stops")
        stop = FleetStop.objects.get()
        page.get_by_label("Reason for resuming (optional)").focus()
        page.keyboard.type("Payments fixed")
        focus_and_submit(page, "Resume refund")

        expect(page.get_by_text("Stop lifted: 1 tasks resumed")).to_be_visible()
        expect(page.get_by_role("status").filter(has_text="A stop is in force")).to_have_count(0)
        expect(page.get_by_role("region", name="Lately lifted")).to_contain_text("Payments fixed")
        found.extend(described(axe_violations(page)))
    finally:
        context.close()
    assert not found, "\n".join(found)
    assert blocked == [], f"the Content-Security-Policy blocked: {blocked}"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED
    assert Event.objects.filter(task=task, action="agentops.task.resumed").count() == 1
    stop.refresh_from_db()
    assert stop.lift_reason == "Payments fixed"
    assert list(
        Decision.objects.filter(action__startswith="reviews.fleet")
        .order_by("id")
        .values_list("action", "actor_label", "channel")
    ) == [
        ("reviews.fleet.stopped", "stella", "browser"),
        ("reviews.fleet.resumed", "stella", "browser"),
    ]


def test_the_stop_page_is_refused_to_an_operator_without_the_permission(
    page: Page, live_server: Any, operator: Any
):
    login(page, live_server, "olga")
    expect(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Stops")
    ).to_have_count(0)
    response = page.goto("/review/stops")
    assert response is not None and response.status == 403
