"""Issue 24's people's actions in a real Chromium: two-person approval, start again and fork from
a step. A worker process advances the tasks; the people click; the test then counts what ran at
the simulated services and what the decision log says.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import Page, expect

from agentops.dev.people import FINANCE_LEADS, four_eyes_policy_ensure
from agentops.models import Task
from agentops.services import task_create
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

    task = wait_status(task, TaskStatus.SUCCEEDED)
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and effects("payments", "refund") == 1
    assert list(
        Decision.objects.filter(task_id_ref=task.pk, action="reviews.gate.approved")
        .order_by("id")
        .values_list("actor_label", "detail__approval", "channel")
    ) == [("olga", 1, "browser"), ("fiona", 2, "browser")]
    assert Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED
