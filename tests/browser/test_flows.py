"""Whole flows in a real Chromium: a person clicks, a real worker executes, the page shows it.

Each test brings a task into its state with the real engine (a worker process against the
simulated services), drives the pages as an operator, auditor or policy admin would, and then
checks both what the page shows and what happened: task status, decisions, and effects counted
at the simulated services.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create
from agentops.models import AuditItem, Gate, Task, ToolCall
from agentops.states import AuditStatus, GateStatus, LedgerStatus, TaskStatus
from policies.services import policy_default_install
from reviews.models import Decision
from tests.browser.conftest import WORKER_TIMEOUT_MS, login, shoot
from tests.conftest import Processes, wait_for
from tests.reviews.builders import effects

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORKER_TIMEOUT = WORKER_TIMEOUT_MS / 1000


def run_workers(processes: Processes, **env: str) -> None:
    processes.worker(extra_env=env)
    processes.sweeper()


def wait_status(task: Task, status: str) -> Task:
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == status,
        timeout=WORKER_TIMEOUT,
        message=f"task {task.pk} to be {status}",
    )
    task.refresh_from_db()
    return task


def open_gate_of(task: Task) -> Gate:
    return wait_for(
        lambda: Gate.objects.filter(task=task, status=GateStatus.OPEN).first(),
        timeout=WORKER_TIMEOUT,
        message=f"a gate on task {task.pk}",
    )


def nav(page: Page) -> Locator:
    return page.get_by_role("navigation", name="Main")


def task_status(page: Page) -> Locator:
    """The status badge of the live part of the task page."""
    return page.locator("#task-live dl.summary dd").first.locator(".badge")


def ledger_row(page: Page, tool: str) -> Locator:
    return (
        page.get_by_role("region", name="Progress")
        .get_by_role("row")
        .filter(has=page.get_by_role("cell", name=tool, exact=True))
    )


def test_an_operator_approves_a_gated_refund_and_the_task_completes(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    task = task_create(
        agent="refund",
        goal="Refund order B2002: the parcel never arrived",
        input={"order_id": "B2002"},
        created_by=starter,
    )
    gate = open_gate_of(task)
    login(page, live_server, "olga")

    # A second tab follows the task page while the decision is made in the first one.
    watcher = page.context.new_page()
    watcher.goto(f"/tasks/{task.pk}")
    expect(task_status(watcher)).to_have_text("Awaiting approval")
    watcher.evaluate("window.sameDocument = true")

    expect(nav(page).locator("#nav-inbox-count")).to_have_text("1")
    nav(page).get_by_role("link", name="Inbox").click()
    row = page.locator(f"#gate-{gate.pk}")
    expect(row).to_contain_text("issue_refund")
    expect(row).to_contain_text("rule large payment · policy v1")
    expect(page.locator("#inbox-summary")).to_have_text("1 open gate · 0 stopped tasks")
    shoot(page, "inbox")

    row.get_by_role("link", name=f"Gate #{gate.pk}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Gate #{gate.pk}")
    expect(page.get_by_text("Step 4 of 5")).to_be_visible()
    expect(page.locator("pre.json")).to_contain_text('"amount": 108.0')
    expect(page.get_by_role("region", name="Why it waits")).to_contain_text("large payment")
    shoot(page, "gate-panel")
    page.get_by_label("Note (optional)").fill("customer sent a photo of the empty box")
    page.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator("#gate-state")).to_contain_text("approved by olga")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(task_status(watcher)).to_have_text("Succeeded", timeout=WORKER_TIMEOUT_MS)
    expect(watcher.locator("#task-live .live-dot")).to_have_count(0)
    expect(ledger_row(watcher, "issue_refund")).to_contain_text("Succeeded")
    assert watcher.evaluate("window.sameDocument") is True
    page.get_by_role("link", name="Follow the task").click()
    expect(task_status(page)).to_have_text("Succeeded")
    expect(page.get_by_role("region", name="Review")).to_contain_text("gate approved")

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and gate.decided_by == operator
    decision = Decision.objects.get()
    assert decision.action == "reviews.gate.approved" and decision.actor_label == "olga"
    assert decision.reason == "customer sent a photo of the empty box"
    assert effects("payments", "refund") == 1
    assert Effect.objects.get(operation="refund").request["amount"] == 108.0


def test_an_operator_rejects_with_feedback_and_the_agent_refunds_less(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    task = task_create(
        agent="refund", goal="Refund order B2002", input={"order_id": "B2002"}, created_by=starter
    )
    gate = open_gate_of(task)
    login(page, live_server, "olga")

    page.goto(f"/review/gates/{gate.pk}")
    feedback = "Refund at most 80 without a manager."
    page.get_by_label("Feedback to the agent").fill(feedback)
    page.get_by_role("button", name="Reject with feedback").click()

    state = page.locator("#gate-state")
    expect(state).to_contain_text("rejected by olga")
    expect(state).to_contain_text(f"Note: {feedback}")
    state.get_by_role("link", name="Follow the task").click()
    expect(task_status(page)).to_have_text("Succeeded", timeout=WORKER_TIMEOUT_MS)
    expect(ledger_row(page, "issue_refund")).to_contain_text("Succeeded")

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED
    assert Gate.objects.get(task=task).status == GateStatus.REJECTED
    refund = ToolCall.objects.get(task=task, tool="issue_refund")
    assert refund.args["amount"] == 80.0 and refund.status == LedgerStatus.SUCCEEDED
    assert refund.step.policy_rule == "small payment"
    assert effects("payments", "refund") == 1
    assert Effect.objects.get(operation="refund").request["amount"] == 80.0
    assert Decision.objects.get().action == "reviews.gate.rejected"


def test_an_operator_rolls_back_a_partial_trip_and_the_flight_is_cancelled_once(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    task = task_create(
        agent="trip",
        goal="Trip to Lisbon for the offsite",
        input={"traveller": "Ada"},
        created_by=starter,
    )
    wait_status(task, TaskStatus.NEEDS_ATTENTION)
    login(page, live_server, "olga")

    nav(page).get_by_role("link", name="Inbox").click()
    row = page.locator(f"#task-{task.pk}")
    expect(row).to_contain_text("authorization gap")
    row.get_by_role("link", name="Stopped task").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Recover task #{task.pk}")
    expect(page.get_by_role("region", name="Goal")).to_contain_text("Trip to Lisbon")
    expect(page.get_by_role("region", name="Breakpoint")).to_contain_text("Step 3 of 4")
    expect(page.get_by_role("region", name="Failure")).to_contain_text("authorization_gap")
    expect(page.get_by_role("region", name="Recommended")).to_be_visible()
    rollback = page.get_by_role("article", name="Rollback")
    expect(rollback).to_contain_text("book_flight")
    shoot(page, "recovery-panel")
    page.get_by_label("Reason (optional)").fill("the customer cancelled the offsite")
    rollback.get_by_role("button", name="Rollback").click()
    # Ending the task is asked again, with the preview.
    confirm = page.get_by_role("region", name="Confirm rollback")
    expect(confirm).to_contain_text("Undoes book_flight")
    confirm.get_by_role("button", name="Confirm rollback").click()

    expect(page).to_have_url(f"{live_server.url}/tasks/{task.pk}")
    expect(task_status(page)).to_have_text("Rolled back", timeout=WORKER_TIMEOUT_MS)
    expect(ledger_row(page, "book_flight")).to_contain_text("Compensated")
    expect(page.get_by_role("region", name="Review")).to_contain_text("intervention rollback")

    task.refresh_from_db()
    assert task.status == TaskStatus.ROLLED_BACK
    decision = Decision.objects.get()
    assert decision.action == "reviews.intervention.rollback"
    assert decision.reason == "the customer cancelled the offsite"
    assert effects("flights", "book") == 1 and effects("hotels", "book") == 0
    assert effects("flights", "cancel") == 1


def test_an_operator_confirms_an_unknown_call_and_it_is_not_repeated(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    # The call times out on the worker after 0.8 s; the service refunds, then answers at 1.5 s.
    run_workers(processes, AGENTOPS_TOOL_TIMEOUT_SECONDS="0.8")
    fault_set(
        service="payments",
        operation="refund_legacy",
        mode="execute_then_timeout",
        count=1,
        delay=1.5,
    )
    task = task_create(
        agent="refund",
        goal="Refund A1001 through the legacy API",
        input={"order_id": "A1001", "refund_api": "legacy"},
        created_by=starter,
    )
    wait_status(task, TaskStatus.NEEDS_ATTENTION)
    call = ToolCall.objects.get(task=task, tool="issue_refund_legacy")
    assert call.status == LedgerStatus.EXECUTED_UNKNOWN
    login(page, live_server, "olga")

    nav(page).get_by_role("link", name="Inbox").click()
    row = page.locator(f"#task-{task.pk}")
    expect(row).to_contain_text("confirm whether a call happened")
    row.get_by_role("link", name="Stopped task").click()
    unknown = page.get_by_role("region", name="Did this call happen?")
    expect(unknown).to_contain_text(call.idempotency_key)
    expect(unknown).to_contain_text("agentops.ledger.executed_unknown")
    unknown.get_by_label("How you know (optional)").fill("seen in the PSP dashboard")
    unknown.get_by_role("button", name="It happened").click()

    expect(page).to_have_url(f"{live_server.url}/tasks/{task.pk}")
    expect(task_status(page)).to_have_text("Succeeded", timeout=WORKER_TIMEOUT_MS)
    expect(ledger_row(page, "issue_refund_legacy")).to_contain_text("Succeeded")

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED
    assert list(
        ToolCall.objects.filter(task=task, tool="issue_refund_legacy").values_list(
            "status", flat=True
        )
    ) == [LedgerStatus.SUCCEEDED]
    decision = Decision.objects.get()
    assert decision.action == "reviews.ledger.confirmed" and decision.detail["executed"] is True
    assert effects("payments", "refund_legacy") == 1
    assert effects("email", "send") == 1


def test_an_auditor_flags_an_item_with_a_note_and_exports_it_as_csv(
    page: Page, live_server: Any, processes: Processes, auditor: Any
):
    run_workers(processes)
    task = task_create(
        agent="refund", goal="Refund order A1001: parcel damaged", input={"order_id": "A1001"}
    )
    wait_status(task, TaskStatus.SUCCEEDED)
    item = AuditItem.objects.get(task=task, tool="issue_refund")
    others = AuditItem.objects.exclude(pk=item.pk)
    assert others.filter(tool="email_customer").exists()
    login(page, live_server, "audrey")

    nav(page).get_by_role("link", name="Audit").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Audit queue")
    for other in others:
        expect(page.locator(f"#audit-{other.pk}")).to_be_visible()
    page.get_by_label("Tool", exact=True).select_option("issue_refund")
    expect(page).to_have_url(re.compile(r"/review/audit\?.*\btool=issue_refund\b"))
    expect(page.locator("#audit-table .table-meta")).to_contain_text("1 item")
    for other in others:
        expect(page.locator(f"#audit-{other.pk}")).to_have_count(0)

    row = page.locator(f"#audit-{item.pk}")
    note = "refund issued before the shipment was tracked"
    row.get_by_label(f"Note on audit item {item.pk}").fill(note)
    row.get_by_role("button", name="Flag").click()
    expect(row).to_contain_text("Flagged")
    expect(row).to_contain_text(note)
    expect(row).to_contain_text("audrey")

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export these as CSV").click()
    download = download_info.value
    assert download.suggested_filename.startswith("audit-")
    with open(download.path(), encoding="utf-8") as handle:
        rows = list(csv.DictReader(io.StringIO(handle.read())))

    assert [row["id"] for row in rows] == [str(item.pk)]
    exported = rows[0]
    assert exported["tool"] == "issue_refund" and exported["status"] == "flagged"
    assert exported["note"] == note and exported["reviewed_by"] == "audrey"
    assert exported["goal"] == "Refund order A1001: parcel damaged"
    item.refresh_from_db()
    assert item.status == AuditStatus.FLAGGED and item.note == note
    decision = Decision.objects.get()
    assert decision.action == "reviews.audit.flagged" and decision.reason == note


def test_a_policy_admin_publishes_a_rule_and_the_next_task_is_gated_by_it(
    page: Page,
    second_page: Page,
    live_server: Any,
    processes: Processes,
    policy_admin: Any,
    operator: Any,
):
    policy_default_install()
    run_workers(processes)
    before = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    rule = "customer emails need approval"
    login(page, live_server, "paula")

    nav(page).get_by_role("link", name="Policies").click()
    page.get_by_role("link", name="default", exact=True).click()
    page.get_by_role("button", name="New draft from v1").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("draft")
    form = page.locator("#rule-form")
    form.get_by_label("Name", exact=True).fill(rule)
    form.get_by_label("Route", exact=True).select_option("gate")
    form.get_by_label("Tools", exact=True).fill("email_customer")
    form.get_by_label("Approver group", exact=True).fill("operators")
    form.get_by_label("Timeout seconds", exact=True).fill("3600")
    form.get_by_role("button", name="Add rule").click()
    rules = page.locator("#draft-editor tbody tr")
    # First match wins: a new rule is placed where it is reached, before "notification", which
    # audits emails (at the end it would never be reached).
    expect(rules.nth(5)).to_contain_text(rule)
    expect(rules.nth(6)).to_contain_text("notification")
    # The person can still move it; moved up and back down, it is where it was.
    page.get_by_role("button", name="Move rule 6 up").click()
    expect(rules.nth(4)).to_contain_text(rule)
    page.get_by_role("button", name="Move rule 5 down").click()
    expect(rules.nth(5)).to_contain_text(rule)
    expect(rules.nth(6)).to_contain_text("notification")
    expect(page.get_by_text("No problems found: this draft can be published.")).to_be_visible()
    page.get_by_label("Change note").fill("Emails to customers wait for an operator.")
    # Publishing is confirmed after reading what changes against the active version.
    expect(page.locator("#publish-preview")).to_contain_text("Compared with the active v1: 1 added")
    page.get_by_label("I have read what changes").check()
    page.get_by_role("button", name="Publish", exact=True).click()
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("default v2")
    expect(heading).to_contain_text("active")

    before = wait_status(before, TaskStatus.SUCCEEDED)
    assert before.policy_version.number == 1
    nav(page).get_by_role("link", name="Start a task").click()
    page.get_by_label("Agent").select_option("refund")
    page.get_by_label("Goal").fill("Refund order A1001 after the policy change")
    page.get_by_label("Input (JSON object, optional)").fill('{"order_id": "A1001"}')
    page.get_by_role("button", name="Start task").click()
    expect(page).to_have_url(re.compile(r"/tasks/\d+$"))
    expect(task_status(page)).to_have_text("Awaiting approval", timeout=WORKER_TIMEOUT_MS)

    after = Task.objects.get(goal="Refund order A1001 after the policy change")
    assert after.created_by == policy_admin and after.policy_version.number == 2
    gate = Gate.objects.get(task=after)
    assert gate.status == GateStatus.OPEN and gate.tool == "email_customer"
    assert gate.rule == rule and gate.policy_version_number == 2
    assert not Gate.objects.filter(task=before).exists()
    # Each task refunded (the audit lane); only the one created before the change emailed.
    assert effects("payments", "refund") == 2
    assert effects("email", "send") == 1

    login(second_page, live_server, "olga")
    nav(second_page).get_by_role("link", name="Inbox").click()
    row = second_page.locator(f"#gate-{gate.pk}")
    expect(row).to_contain_text("email_customer")
    expect(row).to_contain_text(f"rule {rule} · policy v2")


# -- issue 10: the record never lies, every waiting task can be stopped -------------------------


def test_edit_and_approve_shows_the_executed_arguments_and_the_diff(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    task = task_create(
        agent="refund", goal="Refund order B2002", input={"order_id": "B2002"}, created_by=starter
    )
    gate = open_gate_of(task)
    login(page, live_server, "olga")

    page.goto(f"/review/gates/{gate.pk}")
    page.get_by_text("Edit the arguments and approve").click()
    page.get_by_label("Arguments (JSON object)").fill(
        '{"order_id": "B2002", "amount": 90, "currency": "EUR"}'
    )
    page.get_by_label("Why you changed it (optional)").fill("manager cap")
    page.get_by_role("button", name="Approve the edited action").click()

    record = page.get_by_role("region", name="What was approved and run")
    expect(record).to_contain_text("yes, by olga")
    expect(record.get_by_role("table", name="Changes to the arguments")).to_contain_text("108.0")
    expect(record.locator("ins")).to_have_text("90")
    wait_status(task, TaskStatus.SUCCEEDED)
    page.reload()
    record = page.get_by_role("region", name="What was approved and run")
    expect(record.locator("#executed-arguments")).to_contain_text('"amount": 90')
    expect(record).to_contain_text("Succeeded")
    expect(page.get_by_text("no, as the model proposed")).to_have_count(0)
    shoot(page, "gate-edited-record")

    gate.refresh_from_db()
    assert gate.edited and gate.approved_arguments["amount"] == 90
    assert Effect.objects.get(operation="refund").request["amount"] == 90
    assert "We refunded 90 EUR" in Effect.objects.get(operation="send").request["body"]


def test_reject_and_stop_ends_a_gated_task(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    task = task_create(
        agent="refund", goal="Refund order B2002", input={"order_id": "B2002"}, created_by=starter
    )
    gate = open_gate_of(task)
    login(page, live_server, "olga")

    page.goto(f"/review/gates/{gate.pk}")
    page.get_by_text("Reject and stop the task").click()
    expect(page.locator("#stop-preview-abort")).to_contain_text("Ends the task")
    page.get_by_label("Why the task stops").fill("fraud suspected")
    page.get_by_role("button", name="Reject and stop").click()
    # The confirmation is required (the browser refuses to submit without it): nothing happened.
    confirm = page.get_by_label("I have read what this does")
    assert confirm.evaluate("box => !box.validity.valid")
    assert Task.objects.get(pk=task.pk).status == TaskStatus.AWAITING_APPROVAL
    confirm.check()
    page.get_by_role("button", name="Reject and stop").click()

    expect(page.locator("#gate-state")).to_contain_text("rejected by olga")
    page.get_by_role("link", name="Follow the task").click()
    expect(task_status(page)).to_have_text("Aborted")

    task.refresh_from_db()
    assert task.status == TaskStatus.ABORTED
    assert Decision.objects.get().action == "reviews.gate.rejected_and_stopped"
    assert effects("payments", "refund") == 0 and effects("email", "send") == 0


def test_pause_and_resume_a_running_task(
    page: Page, live_server: Any, processes: Processes, operator: Any
):
    run_workers(processes)
    # Signed in first: the slow step must still run when the task page loads, loaded machine or not.
    login(page, live_server, "olga")
    # The shipment lookup answers after 5 s: the task is running while the operator pauses it.
    fault_set(service="logistics", operation="track", mode="slow", count=1, delay=5.0)
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    wait_for(
        lambda: Task.objects.get(pk=task.pk).current_step >= 2,
        timeout=WORKER_TIMEOUT,
        message="the slow step to start",
    )

    page.goto(f"/tasks/{task.pk}")
    expect(task_status(page)).to_have_text("Running")
    page.locator("#pause-form").get_by_role("button", name="Pause").click()
    expect(page.get_by_text(f"Task #{task.pk} paused.")).to_be_visible()
    expect(task_status(page)).to_have_text("Paused")
    # The worker stops at its next checkpoint (once the slow lookup answers): the task stays paused.
    page.wait_for_timeout(6000)
    assert Task.objects.get(pk=task.pk).status == TaskStatus.PAUSED
    page.reload()
    page.locator("#resume-form").get_by_role("button", name="Resume").click()
    expect(task_status(page)).to_have_text("Succeeded", timeout=WORKER_TIMEOUT_MS)

    actions = list(Decision.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["reviews.task.paused", "reviews.task.resumed"]
    assert effects("payments", "refund") == 1 and effects("email", "send") == 1


def test_cancel_a_queued_task(page: Page, live_server: Any, processes: Processes, operator: Any):
    # No worker yet: the task stays queued until the operator cancels it.
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    login(page, live_server, "olga")

    page.goto(f"/tasks/{task.pk}")
    expect(task_status(page)).to_have_text("Queued")
    cancel = page.locator("#cancel-form")
    cancel.get_by_label("The task ends now; effects made stay").check()
    cancel.get_by_role("button", name="Cancel").click()
    expect(task_status(page)).to_have_text("Cancelled")
    run_workers(processes)
    page.wait_for_timeout(2000)

    task.refresh_from_db()
    assert task.status == TaskStatus.ABORTED
    assert Decision.objects.get().action == "reviews.task.cancelled"
    assert not ToolCall.objects.filter(task=task).exists()


def test_a_second_failed_retry_changes_the_recommendation(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    fault_set(service="hotels", operation="book", mode="forbidden", count=3)
    task = task_create(
        agent="trip", goal="Trip to Lisbon", input={"traveller": "Ada"}, created_by=starter
    )
    wait_status(task, TaskStatus.NEEDS_ATTENTION)
    login(page, live_server, "olga")

    for round_ in (1, 2):
        page.goto(f"/review/tasks/{task.pk}/recover")
        if round_ == 1:
            expect(page.get_by_role("article", name="Retry")).to_contain_text("recommended")
        page.get_by_role("article", name="Retry").get_by_role("button", name="Retry").click()
        expect(page).to_have_url(f"{live_server.url}/tasks/{task.pk}")
        wait_for(
            lambda n=round_: (
                Decision.objects.count() == n
                and Task.objects.get(pk=task.pk).status == TaskStatus.NEEDS_ATTENTION
            ),
            timeout=WORKER_TIMEOUT,
            message="the retry to fail again",
        )
        if round_ == 1:
            # After one failed retry the advisor already stops recommending it.
            page.goto(f"/review/tasks/{task.pk}/recover")
            expect(page.get_by_role("region", name="Recommended")).to_contain_text(
                "already failed the same way"
            )

    page.goto(f"/review/tasks/{task.pk}/recover")
    recommended = page.get_by_role("region", name="Recommended")
    expect(recommended).not_to_contain_text("Retry")
    expect(recommended).to_contain_text("2 times")
    expect(page.locator("#attempts")).to_contain_text("3 attempts in all")
    expect(page.locator("#intervention-history")).to_contain_text("failed again")
    shoot(page, "recovery-after-failed-retries")


def test_assign_to_a_colleague_who_then_sees_it_under_mine(
    page: Page,
    second_page: Page,
    live_server: Any,
    processes: Processes,
    operator: Any,
    starter: Any,
    django_user_model: Any,
):
    from tests.reviews.conftest import make_user

    make_user(django_user_model, "otto", "operators")
    run_workers(processes)
    task = task_create(
        agent="refund", goal="Refund order B2002", input={"order_id": "B2002"}, created_by=starter
    )
    gate = open_gate_of(task)
    login(page, live_server, "olga")

    nav(page).get_by_role("link", name="Inbox").click()
    row = page.locator(f"#gate-{gate.pk}")
    row.get_by_label(f"Assign task {task.pk} to").select_option(label="otto")
    row.get_by_role("button", name="Assign").click()
    expect(page.locator(f"#gate-{gate.pk}")).to_contain_text("otto")

    login(second_page, live_server, "otto")
    nav(second_page).get_by_role("link", name="Inbox").click()
    second_page.locator("#inbox-mine").click()
    expect(second_page).to_have_url(re.compile(r"/review/\?mine=on"))
    expect(second_page.locator(f"#gate-{gate.pk}")).to_contain_text("otto")
    decision = Decision.objects.get()
    assert decision.action == "reviews.claim.assigned" and decision.actor_label == "olga"


def test_inbox_filter_by_agent(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    trip = task_create(
        agent="trip", goal="Trip to Lisbon", input={"traveller": "Ada"}, created_by=starter
    )
    refund = task_create(
        agent="refund", goal="Refund order B2002", input={"order_id": "B2002"}, created_by=starter
    )
    gate = open_gate_of(refund)
    wait_status(trip, TaskStatus.NEEDS_ATTENTION)
    login(page, live_server, "olga")

    nav(page).get_by_role("link", name="Inbox").click()
    expect(page.locator(f"#task-{trip.pk}")).to_be_visible()
    expect(page.locator(f"#gate-{gate.pk}")).to_be_visible()
    filters = page.get_by_role("form", name="Filter the inbox")
    filters.get_by_label("Agent").select_option("trip")
    filters.get_by_role("button", name="Filter").click()

    expect(page).to_have_url(re.compile(r"/review/\?.*\bagent=trip\b"))
    expect(page.locator(f"#task-{trip.pk}")).to_be_visible()
    expect(page.locator(f"#gate-{gate.pk}")).to_have_count(0)
    page.reload()
    expect(page.locator(f"#gate-{gate.pk}")).to_have_count(0)
