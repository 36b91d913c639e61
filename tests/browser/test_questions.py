"""An operator answers an agent's question in a real Chromium: from the inbox's question lane to
the question panel, a choice among the options the agent offered, and a real worker that refunds
what the answer says."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Gate, ToolCall
from agentops.states import GateStatus, TaskStatus
from reviews.models import Decision
from tests.browser.conftest import WORKER_TIMEOUT_MS, login, shoot
from tests.browser.test_flows import run_workers, task_status
from tests.conftest import Processes, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_answers_the_agents_question_and_the_agent_acts_on_it(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    task = task_create(
        agent="refund_ask",
        goal="Refund the cracked lid of order A1001",
        input={"order_id": "A1001", "note": "the lid is cracked"},
        created_by=starter,
    )
    gate = wait_for(
        lambda: Gate.objects.filter(task=task, status=GateStatus.OPEN).first(),
        timeout=90,
        message=f"the question of task {task.pk}",
    )
    login(page, live_server, "olga")

    page.goto(f"{live_server.url}/review/?kind=question")
    row = page.locator(f"#gate-{gate.pk}")
    expect(row).to_contain_text("How much should we refund?")
    row.get_by_role("link", name=f"Question #{gate.pk}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Question #{gate.pk}")
    asks = page.get_by_role("region", name="The agent asks")
    expect(asks).to_contain_text("the lid is cracked")
    expect(asks).to_contain_text("paid 56.0 EUR")
    page.get_by_label("half").check()
    shoot(page, "question-panel")
    page.get_by_role("button", name="Send the answer").click()

    expect(page).to_have_url(f"{live_server.url}/tasks/{task.pk}")
    expect(page.get_by_role("status").first).to_contain_text("your answer goes to the agent")
    expect(task_status(page)).to_have_text("Succeeded", timeout=WORKER_TIMEOUT_MS)
    expect(page.get_by_role("region", name="Review")).to_contain_text("question answered")

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED
    assert ToolCall.objects.get(task=task, tool="issue_refund").args["amount"] == 28.0
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    (decision,) = Decision.objects.all()
    assert decision.action == "reviews.question.answered" and decision.actor_label == "olga"
