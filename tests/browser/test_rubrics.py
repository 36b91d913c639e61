"""An auditor answers an audit item's rubric in a real Chromium with the keyboard alone: she takes
the item in a batch, then goes from the audit queue's "Next item to answer" to the rubric page
(the other reviewer's answers hidden until then), each question answered with Space and the
arrow keys, submitted with Enter; the item is settled as both agreed, and every page on the way
passes axe."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.models import AuditReservation, Decision, RubricReview
from reviews.services import rubric_create, rubric_queue_attach, rubric_review_submit
from tests.browser.axe import axe_preloaded, axe_violations, described
from tests.browser.conftest import ACTION_TIMEOUT_MS, VIEWPORT, csp_watched, login, shoot
from tests.reviews.conftest import make_user
from tests.reviews.history import T0, Clock, make_audit_item, make_task
from tests.reviews.test_rubrics import ITEMS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def axe_page(chromium: Browser, live_server: Any) -> Iterator[Page]:
    """A page whose context has axe preloaded (the site's CSP refuses inline scripts), watched
    for anything the CSP blocks."""
    context = axe_preloaded(chromium.new_context(viewport=VIEWPORT, base_url=live_server.url))
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    violations = csp_watched(context)
    yield context.new_page()
    context.close()
    assert violations == [], f"the Content-Security-Policy blocked: {violations}"


def test_an_auditor_answers_a_rubric_with_the_keyboard_and_sees_the_other_review_after(
    axe_page: Page, live_server: Any, policy_admin: Any, auditor: Any, django_user_model: Any
):
    page = axe_page
    ben = make_user(django_user_model, "ben", "auditors")
    rubric = rubric_create(actor=policy_admin, name="Refund quality", items=ITEMS)
    rubric_queue_attach(
        actor=policy_admin,
        rubric_id=rubric.pk,
        agent="refund",
        rule="small payment",
        instructions="Two of you read each refund.",
        reviews_required=2,
    )
    clock = Clock(T0)
    item = make_audit_item(clock, make_task(clock))
    given = {"correct": "pass", "tone": 3, "cause": "damage"}
    rubric_review_submit(
        item_id=item.pk, actor=ben, answers=given, verdict="ok", note="ben read it <first>"
    )
    found: list[str] = []
    login(page, live_server, "audrey")

    page.goto("/review/audit")
    row = page.locator(f"#audit-{item.pk}")
    expect(row).to_contain_text("Refund quality: Waiting for reviews, 1 of 2")
    found.extend(described(axe_violations(page)))
    # Take the item in a batch for 20 minutes, with the keyboard too.
    page.get_by_label("Items to take").fill("5")
    page.get_by_label("Minutes").fill("20")
    page.get_by_label("Minutes").press("Enter")
    expect(page.locator(".messages")).to_contain_text("1 item taken for 20 minutes")
    expect(page.locator(f"#held-{item.pk}")).to_contain_text("Yours until")
    found.extend(described(axe_violations(page)))
    page.get_by_role("link", name="Next item to answer").focus()
    page.keyboard.press("Enter")

    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Audit item #{item.pk}")
    expect(page.locator("#rubric-status")).to_contain_text("1 of 2 reviews in")
    expect(page.get_by_text("ben read it")).to_have_count(0)
    expect(page.get_by_text("Two of you read each refund.")).to_be_visible()
    found.extend(described(axe_violations(page)))
    # The page opens on the first question: Space chooses, Tab goes to the next question, the
    # arrow keys move along a scale; the verdict is chosen too (none is given by default), then
    # Tab past the note and the correction to the button, Enter submits.
    expect(page.get_by_label("pass: amount and order match the request")).to_be_focused()
    page.keyboard.press("Space")
    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    expect(page.get_by_label("3: kind")).to_be_checked()
    expect(page.get_by_label("damage: the goods arrived damaged")).to_be_checked()
    expect(page.get_by_role("radio", name="OK", exact=True)).not_to_be_checked()
    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    expect(page.get_by_role("radio", name="OK", exact=True)).to_be_checked()
    for _ in range(3):
        page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Submit and go to the next item")).to_be_focused()
    shoot(page, "rubric-answer")
    page.keyboard.press("Enter")

    expect(page.locator("#rubric-status")).to_contain_text("Reviewers agreed: 2 of 2 reviews in")
    reviews = page.get_by_role("table", name=f"Reviews of audit item {item.pk}")
    expect(reviews).to_contain_text("ben read it <first>")
    expect(reviews.get_by_role("row")).to_have_count(3)
    found.extend(described(axe_violations(page)))
    page.goto("/review/rubrics")
    expect(page.locator("#rubric-agreement")).to_contain_text("Refund quality")
    found.extend(described(axe_violations(page)))
    page.goto("/review/audit/adjudication")
    found.extend(described(axe_violations(page)))

    assert found == []
    item.refresh_from_db()
    assert item.status == AuditStatus.OK
    mine = RubricReview.objects.get(reviewer=auditor)
    assert mine.answers == given and mine.verdict == "ok"
    assert Decision.objects.filter(action="reviews.rubric.answered", channel="browser").count() == 1
    assert AuditItem.objects.filter(status=AuditStatus.PENDING).count() == 0
    # Her review ended her hold; taking the batch was one decision.
    assert not AuditReservation.objects.exists()
    assert Decision.objects.filter(action="reviews.reservation.taken").count() == 1
