"""Issue 24's people's actions in a real Chromium: two-person approval, start again and fork from
a step. A worker process advances the tasks; the people click; the test then counts what ran at
the simulated services and what the decision log says.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import Page, expect

from agentops.dev.people import FINANCE_LEADS, four_eyes_policy_ensure
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create
from agentops.models import Task
from agentops.states import GateStatus, TaskStatus
from reviews.models import Decision
from tests.browser.conftest import login, shoot
from tests.browser.test_flows import open_gate_of, run_workers, wait_status
from tests.conftest import Processes
from tests.reviews.builders import effects
from tests.reviews.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fiona(roles: None, django_user_model: Any) -> Any:
    Group.objects.get_or_create(name=FINANCE_LEADS)
    return make_user(django_user_model, "fiona", "operators", FINANCE_LEADS)


def test_two_people_approve_a_four_eyes_gate_and_the_refund_runs_once(
    page: Page,
    second_page: Page,
    live_server: Any,
    processes: Processes,
    operator: Any,
    starter: Any,
    fiona: Any,
):
    run_workers(processes)
    policy = four_eyes_policy_ensure(author=fiona)
    task = task_create(
        agent="refund",
        goal="Refund order B2002: four eyes",
        input={"order_id": "B2002"},
        created_by=starter,
        policy=policy,
    )
    gate = open_gate_of(task)

    login(page, live_server, "olga")
    page.goto(f"/review/gates/{gate.pk}")
    expect(page.locator("#approvals-count")).to_have_text("0 of 2")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#approvals-count")).to_have_text("1 of 2")
    expect(page.locator("#approvals")).to_contain_text("approved by olga")
    expect(page.locator("#decide-refusal")).to_contain_text("you approved this already")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    shoot(page, "four-eyes-1-of-2")

    login(second_page, live_server, "fiona")
    second_page.goto("/review/")
    expect(second_page.locator(f"#approvals-gate-{gate.pk}")).to_contain_text(
        "1 of 2 approvals · by olga · next: finance leads"
    )
    second_page.goto(f"/review/gates/{gate.pk}")
    second_page.get_by_role("button", name="Approve", exact=True).click()
    expect(second_page.locator("#gate-state")).to_contain_text("approved by fiona")
    # The gate's approvals after the second one: both people, not "1 of 2".
    expect(second_page.locator("#approvals-count")).to_have_text("2 of 2")
    expect(second_page.locator("#approvals .approvals-given li")).to_have_text(
        [re.compile(r"^approved by olga"), re.compile(r"^approved by fiona")]
    )

    task = wait_status(task, TaskStatus.SUCCEEDED)
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and effects("payments", "refund") == 1
    assert list(
        Decision.objects.filter(task_id_ref=task.pk, action="reviews.gate.approved")
        .order_by("id")
        .values_list("actor_label", "detail__approval", "channel")
    ) == [("olga", 1, "browser"), ("fiona", 2, "browser")]
    assert Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED


def test_an_operator_starts_a_stopped_trip_again_and_both_tasks_link(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    old = task_create(
        agent="trip", goal="Trip to Lisbon", input={"traveller": "Ada"}, created_by=starter
    )
    old = wait_status(old, TaskStatus.NEEDS_ATTENTION)
    login(page, live_server, "olga")

    page.goto(f"/tasks/{old.pk}")
    page.locator("#restart-section summary").click()
    page.get_by_label("Abort it: it ends now, effects made stay").check()
    page.locator("#restart_input").fill('{"traveller": "Ada King"}')
    page.locator("#restart_reason").fill("the hotel refused; book again under her full name")
    shoot(page, "restart-form")
    page.get_by_role("button", name="Start again").click()

    expect(page.locator("#origin-link")).to_contain_text(f"Started again from task #{old.pk}")
    new = Task.objects.get(origin=old)
    new = wait_status(new, TaskStatus.SUCCEEDED)
    old.refresh_from_db()
    assert old.status == TaskStatus.ABORTED and new.input == {"traveller": "Ada King"}
    page.goto(f"/tasks/{old.pk}")
    expect(page.locator("#again-links")).to_contain_text(f"Started again as task #{new.pk}")
    assert Decision.objects.filter(task_id_ref=old.pk, action="reviews.task.restarted").count() == 1


def test_an_operator_forks_a_refund_from_the_email_and_nothing_before_runs_again(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    old = task_create(
        agent="refund", goal="Refund A1001", input={"order_id": "A1001"}, created_by=starter
    )
    old = wait_status(old, TaskStatus.SUCCEEDED)
    refunds = effects("payments", "refund")
    login(page, live_server, "olga")

    page.goto(f"/tasks/{old.pk}")
    page.locator("#fork-section summary").click()
    page.get_by_label("Continue from step").select_option(label="step 5: Email the customer")
    page.locator("#fork_reason").fill("resend the confirmation")
    page.get_by_role("button", name="Fork", exact=True).click()

    expect(page.locator("#origin-link")).to_contain_text(f"Forked from task #{old.pk} at step 5")
    expect(page.locator("#referenced-ledger")).to_contain_text("issue_refund")
    shoot(page, "fork-page")
    new = wait_status(Task.objects.get(origin=old), TaskStatus.SUCCEEDED)
    assert effects("payments", "refund") == refunds == 1
    assert [c.tool for c in new.tool_calls.all()] == ["email_customer"]
