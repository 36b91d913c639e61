"""The operator's pages in a real Chromium, each check a defect of issue 40 that people met:
cancelled tasks named alike on the task page and in the list (and its filter), "start again" on
the recovery panel with the server's own error, the inbox's Assign inside its box at 1280 and
1440 px, the grant card (one reason, and who can grant for those who cannot), a ledger key's
tries told apart, and a refused Approve link titled as an Approve link.

The rows come from the real engine, in-process against the simulated services (`sim`).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils.http import urlencode
from playwright.sync_api import Page, expect

from agentops.models import Task, ToolCall
from agentops.states import LedgerStatus
from reviews.email_actions import email_action_token
from reviews.services import intervention_apply, scope_grant_apply, task_control_apply
from reviews.states import VIA_BROWSER
from tests.browser.conftest import login, shoot
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import gated_refund, open_gate, stopped_trip
from tests.reviews.conftest import make_user
from tests.reviews.test_grants import SCOPE, stopped_goodwill

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def granter(roles: None, django_user_model: Any) -> Any:
    return make_user(django_user_model, "grace", "operators", "scope granters")


def task_row(page: Page, task: Task) -> Any:
    return page.get_by_role("row").filter(has=page.get_by_role("link", name=f"#{task.pk}"))


def test_a_cancelled_task_is_cancelled_in_the_list_and_its_filter(
    page: Page, live_server: Any, sim: str, operator: Any, starter: Any
):
    cancelled = stopped_trip(created_by=starter, goal="Trip to Lisbon, cancelled")
    task_control_apply(task_id=cancelled.pk, action="cancel", actor=operator, via=VIA_BROWSER)
    aborted = stopped_trip(created_by=starter, goal="Trip to Porto, aborted")
    intervention_apply(task_id=aborted.pk, action="abort", actor=operator, via=VIA_BROWSER)
    login(page, live_server, "olga")

    page.goto(f"/tasks/{cancelled.pk}")
    expect(page.locator(".badge-aborted").first).to_have_text("Cancelled")
    page.goto("/")
    expect(task_row(page, cancelled)).to_contain_text("Cancelled")
    expect(task_row(page, aborted)).to_contain_text("Aborted")

    page.get_by_label("Status").select_option(label="Cancelled")
    expect(page).to_have_url(re.compile(r"status=cancelled"))
    expect(task_row(page, cancelled)).to_be_visible()
    expect(task_row(page, aborted)).to_have_count(0)
    page.get_by_label("Status").select_option(label="Aborted")
    expect(task_row(page, aborted)).to_be_visible()
    expect(task_row(page, cancelled)).to_have_count(0)
    # The filter's address, typed or bookmarked, is accepted too.
    page.goto("/?" + urlencode({"status": "cancelled"}))
    expect(page.get_by_label("Status")).to_have_value("cancelled")
    expect(task_row(page, cancelled)).to_be_visible()


def test_an_operator_starts_a_stopped_task_again_from_the_recovery_panel(
    page: Page, live_server: Any, sim: str, operator: Any, starter: Any
):
    old = stopped_trip(created_by=starter)
    login(page, live_server, "olga")

    page.goto(f"/review/tasks/{old.pk}/recover")
    section = page.locator("#restart-section")
    section.locator("summary").click()
    section.locator("#restart_reason").fill("the hotel refused; book again")
    # Sent without choosing how the old task ends: the server says so, and keeps the reason.
    section.get_by_role("button", name="Start again").click()
    expect(section.locator("#restart_ending_error")).to_have_text(
        "Choose what happens to the old task."
    )
    expect(section.get_by_role("alert")).to_contain_text("Nothing was started")
    expect(section.locator("#restart_reason")).to_have_value("the hotel refused; book again")
    shoot(page, "recovery-start-again-error")
    assert not Task.objects.filter(origin=old).exists()

    section.get_by_label("Abort it: it ends now, effects made stay").check()
    section.get_by_role("button", name="Start again").click()
    expect(page.locator("#origin-link")).to_contain_text(f"Started again from task #{old.pk}")
    assert Task.objects.get(origin=old).created_by == operator


def test_the_start_again_form_of_the_task_page_shows_the_servers_error(
    page: Page, live_server: Any, sim: str, operator: Any, starter: Any
):
    old = stopped_trip(created_by=starter)
    login(page, live_server, "olga")

    page.goto(f"/tasks/{old.pk}")
    page.locator("#restart-section summary").click()
    page.locator("#restart_reason").fill("again")
    page.get_by_role("button", name="Start again").click()
    expect(page.locator("#restart_ending_error")).to_have_text(
        "Choose what happens to the old task."
    )
    expect(page).to_have_url(f"{live_server.url}/tasks/{old.pk}")
    assert not Task.objects.filter(origin=old).exists()


# The inbox's box and the table in it; the Assign button's right edge and the viewport's.
INBOX_FIT = """() => {
  const box = document.querySelector('.table-scroll');
  const assign = document.querySelector('[id^="assign-button-"]');
  return {box: box.clientWidth, table: box.scrollWidth,
          assign: Math.round(assign.getBoundingClientRect().right), viewport: innerWidth};
}"""


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_inbox_table_fits_its_box_on_a_laptop(
    page: Page, live_server: Any, sim: str, operator: Any, starter: Any, granter: Any, width: int
):
    gated_refund(created_by=starter, goal="Refund order B2002 " + "with a long goal " * 8)
    stopped_trip(created_by=starter)
    login(page, live_server, "olga")

    page.set_viewport_size({"width": width, "height": 800})
    page.goto("/review/")
    expect(page.locator('[id^="assign-button-"]').first).to_be_visible()
    fit = page.evaluate(INBOX_FIT)
    shoot(page, f"inbox-{width}")
    assert fit["table"] <= fit["box"], fit
    assert fit["assign"] <= fit["viewport"], fit


def test_the_grant_card_asks_one_reason_and_says_who_can_grant(
    page: Page, live_server: Any, sim: str, operator: Any, granter: Any
):
    task = stopped_goodwill()

    login(page, live_server, "grace")
    page.goto(f"/review/tasks/{task.pk}/recover")
    # One field a person reads as "Reason" among the options; the grant's own says what it is for.
    options = page.get_by_role("region", name="Options")
    expect(options.get_by_role("textbox", name=re.compile(r"^Reason"))).to_have_count(1)
    expect(
        options.get_by_role("textbox", name=re.compile(r"^Reason"))
    ).to_have_accessible_description(re.compile(r"your choice of retry, skip or abort\."))
    grant = page.get_by_role("article", name="Grant")
    expect(grant.get_by_role("textbox")).to_have_accessible_name("Why grant it")
    shoot(page, "grant-card-granter")
    page.get_by_role("button", name="Log out").click()

    login(page, live_server, "olga")
    page.goto(f"/review/tasks/{task.pk}/recover")
    expect(page.get_by_role("region", name="Recommended")).to_contain_text("Grant")
    grant = page.get_by_role("article", name="Grant")
    expect(grant.get_by_role("button")).to_have_count(0)
    expect(grant.locator("#grant-who")).to_contain_text("grace")
    shoot(page, "grant-card-operator")


def test_a_key_tried_twice_says_which_try_each_ledger_row_is(
    page: Page, live_server: Any, sim: str, operator: Any, granter: Any
):
    task = stopped_goodwill()
    scope_grant_apply(
        task_id=task.pk,
        scope=SCOPE,
        minutes=60,
        to_agent=False,
        actor=granter,
        reason="credential predates the tool",
        via=VIA_BROWSER,
    )
    run_until_parked_or_done(Task.objects.get(pk=task.pk))
    credit = list(ToolCall.objects.filter(task=task, tool="issue_credit").order_by("id"))
    assert [c.status for c in credit] == [LedgerStatus.FAILED, LedgerStatus.SUCCEEDED]
    assert credit[0].idempotency_key == credit[1].idempotency_key
    login(page, live_server, "olga")

    page.goto(f"/tasks/{task.pk}")
    key = credit[0].idempotency_key
    ledger = page.get_by_role("region", name="Side-effect ledger")
    rows = ledger.get_by_role("row").filter(has_text=key)
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("try 1 of 2")
    expect(rows.nth(1)).to_contain_text("try 2 of 2")


def test_a_refused_approve_link_is_titled_as_an_approve_link(
    page: Page, live_server: Any, sim: str, operator: Any, starter: Any, granter: Any
):
    gate = open_gate(gated_refund(created_by=starter))
    # A link sent to grace, opened by olga: refused, and still an Approve link.
    token = email_action_token(gate=gate, user=granter, action="approve")
    login(page, live_server, "olga")

    page.goto(f"/review/email-actions/{token}")
    expect(page.locator("#link-error")).to_contain_text("sent to someone else")
    expect(page).to_have_title(re.compile(r"^Approve from the email"))
