"""A scope granter grants the scope a service refused, in a real Chromium, and a real worker
continues the refused step under the grant; then revokes the grant from the task page."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Event, ScopeGrant
from agentops.states import TaskStatus
from reviews.models import Decision
from tests.browser.conftest import WORKER_TIMEOUT_MS, login, shoot
from tests.browser.test_flows import run_workers, task_status, wait_status
from tests.conftest import Processes
from tests.reviews.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def granter(roles: None, django_user_model: Any) -> Any:
    return make_user(django_user_model, "grace", "operators", "scope granters")


def test_a_granter_grants_the_missing_scope_and_the_step_continues_under_it(
    page: Page, live_server: Any, processes: Processes, granter: Any
):
    run_workers(processes)
    task = task_create(
        agent="goodwill",
        goal="Credit 10 EUR for the late parcel of A1010",
        input={"order_id": "A1010", "amount": 10},
    )
    wait_status(task, TaskStatus.NEEDS_ATTENTION)
    login(page, live_server, "grace")

    page.goto(f"{live_server.url}/review/")
    page.locator(f"#task-{task.pk}").get_by_role("link", name="Stopped task").click()
    expect(page.get_by_role("region", name="Recommended")).to_contain_text("Grant")
    expect(page.get_by_role("region", name="Recommended")).to_contain_text("payments:credit")
    grant = page.get_by_role("article", name="Grant")
    expect(grant.locator("#grant-scope")).to_have_text("payments:credit")
    grant.get_by_label("This task only").check()
    grant.get_by_label("For").select_option(label="15 minutes")
    grant.get_by_label("Why grant it").fill("The credit tool came after the credential")
    shoot(page, "scope-grant")
    grant.get_by_role("button", name="Grant payments:credit and continue").click()

    expect(page).to_have_url(f"{live_server.url}/tasks/{task.pk}")
    expect(page.get_by_role("status").first).to_contain_text("payments:credit granted")
    expect(task_status(page)).to_have_text("Succeeded", timeout=WORKER_TIMEOUT_MS)
    grants = page.get_by_role("region", name="Scope grants")
    expect(grants).to_contain_text("in force")
    expect(grants).to_contain_text("The credit tool came after the credential")

    grants.get_by_label("Why revoke grant").fill("task done")
    grants.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("region", name="Scope grants")).to_contain_text("revoked by grace")

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED
    actions = list(Decision.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["reviews.scope.granted", "reviews.scope.revoked"]
    assert ScopeGrant.objects.get().revoked_by_label == "grace"
    assert Effect.objects.filter(service="payments", operation="credit").count() == 1
    starts = Event.objects.filter(task=task, action="agentops.step.started")
    assert sorted(starts.values_list("step_ordinal", flat=True)) == [0, 1, 2, 2, 3]
