"""Plan repair in a real Chromium: a trip's hotel is fully booked, a real worker stops the task,
an operator changes the hotel step's instruction from the recovery panel (preview first, then
apply with a retry), and the worker finishes the task under the repaired plan; the flight is
booked once, the hotel once, and one decision records the change."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from agentops.engine import task_create
from agentops.models import Task, ToolCall
from agentops.states import LedgerStatus, TaskStatus
from reviews.models import Decision
from tests.browser.conftest import WORKER_TIMEOUT_MS, login, shoot
from tests.conftest import Processes, wait_for
from tests.reviews.builders import effects

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_repairs_the_plan_and_the_worker_follows_it(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    processes.worker()
    processes.sweeper()
    task = task_create(
        agent="trip",
        goal="Trip to Rome for Ada",
        input={"traveller": "Ada", "hotel_id": "H0404"},
        created_by=starter,
    )
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.NEEDS_ATTENTION,
        timeout=WORKER_TIMEOUT_MS / 1000,
        message="the trip to stop on the fully booked hotel",
    )
    login(page, live_server, "olga")

    page.goto(f"/review/tasks/{task.pk}/recover")
    expect(page.get_by_role("region", name="Recommended", exact=True)).to_contain_text("Repair")
    repair = page.locator("#plan-repair")
    expect(repair).to_contain_text("recommended")
    expect(repair).to_contain_text("flight_only")
    repair.get_by_label("Change", exact=True).select_option("instruct")
    repair.get_by_label("Step number").fill("3")
    repair.get_by_label("Instruction", exact=True).fill(
        "Hotel H0404 is fully booked: book hotel H7000 instead."
    )
    repair.get_by_label("Reason", exact=True).fill("H0404 is sold out for these dates")
    repair.get_by_role("button", name="Preview the change").click()

    preview = page.get_by_role("region", name="Preview")
    expect(preview).to_contain_text("step 3 'Book the hotel': instruction")
    expect(preview).to_contain_text("Runs next: 3. Book the hotel (book_hotel)")
    expect(preview).to_contain_text("4. Send the itinerary")
    shoot(page, "plan-repair-preview")
    assert not Decision.objects.exists()  # a preview writes nothing
    repair = page.locator("#plan-repair")
    repair.get_by_label("Retry the task under the new plan").check()
    repair.get_by_role("button", name="Apply this change").click()

    expect(page).to_have_url(f"{live_server.url}/tasks/{task.pk}")
    expect(page.locator(".messages")).to_contain_text(
        "the plan is repaired and the task is retried"
    )
    badge = page.locator("#task-live dl.summary dd").first.locator(".badge")
    expect(badge).to_have_text("Succeeded", timeout=WORKER_TIMEOUT_MS)
    expect(page.locator("#task-live")).to_contain_text(
        "Instruction: Hotel H0404 is fully booked: book hotel H7000 instead."
    )

    decision = Decision.objects.get()
    assert decision.action == "reviews.plan.repaired" and decision.channel == "browser"
    assert decision.detail["then"] == "retry"
    hotel = ToolCall.objects.get(task=task, tool="book_hotel", status=LedgerStatus.SUCCEEDED)
    assert hotel.args["hotel_id"] == "H7000"
    assert effects("flights", "book") == 1 and effects("hotels", "book") == 1
    assert effects("email", "send") == 1
