"""Rubric reviews at HTTP level: the queue links an item under a rubric to its page, the page
answers it (CSRF, roles on the server, the others' answers only after one's own), the
adjudication lane, and the rubrics page where policy admins define and attach rubrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.models import Decision, Rubric, RubricQueue, RubricReview
from reviews.services import audit_item_review, rubric_review_submit
from tests.reviews.builders import client_for
from tests.reviews.conftest import make_user
from tests.reviews.test_rubrics import ITEMS, answers, refund_item_made, rubric

pytestmark = pytest.mark.django_db

FORM = {"a_correct": "pass", "a_tone": "3", "a_cause": "damage", "verdict": "ok"}


@pytest.fixture
def ben(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "ben", "auditors")


def test_the_queue_row_links_an_item_under_a_rubric_instead_of_ok_and_flag(
    policy_admin, auditor, clock
):
    rubric(policy_admin, reviews=2)
    item = refund_item_made(clock)

    page = client_for(auditor).get(reverse("reviews:audit")).content.decode()
    row = page[page.index(f'<tr id="audit-{item.pk}">') :]
    row = row[: row.index("</tr>")]

    assert reverse("reviews:audit_rubric", args=[item.pk]) in row
    assert '<span translate="no">Refund quality</span>: Waiting for reviews, 0 of 2' in row
    assert reverse("reviews:audit_review", args=[item.pk]) not in row


def test_an_auditor_answers_then_goes_to_the_next_item_and_sees_the_others_only_after(
    policy_admin, auditor, ben, clock
):
    rubric(policy_admin, reviews=2)
    first, second = refund_item_made(clock), refund_item_made(clock)
    rubric_review_submit(
        item_id=first.pk, actor=ben, answers=answers(), verdict="ok", note="ben's <b>note</b>"
    )
    client = client_for(auditor, enforce_csrf_checks=False)

    before = client.get(reverse("reviews:audit_rubric", args=[first.pk])).content.decode()
    assert "1 of 2 reviews in" in before and "ben&#x27;s" not in before
    assert 'name="a_correct"' in before and "amount and order match the request" in before
    answered = client.post(reverse("reviews:audit_rubric_answer", args=[first.pk]), FORM)
    after = client.get(reverse("reviews:audit_rubric", args=[first.pk])).content.decode()

    assert answered.status_code == 302
    assert answered["Location"] == reverse("reviews:audit_rubric", args=[second.pk])
    assert "Reviewers agreed" in after and "ben&#x27;s &lt;b&gt;note&lt;/b&gt;" in after
    first.refresh_from_db()
    assert first.status == AuditStatus.OK
    assert Decision.objects.filter(action="reviews.rubric.answered", channel="browser").count() == 1


def test_a_missing_required_answer_is_400_with_the_form_kept_and_nothing_written(
    policy_admin, auditor, clock
):
    rubric(policy_admin)
    item = refund_item_made(clock)

    answered = client_for(auditor).post(
        reverse("reviews:audit_rubric_answer", args=[item.pk]), {**FORM, "a_correct": ""}
    )

    assert answered.status_code == 400
    assert "This field is required." in answered.content.decode()
    assert RubricReview.objects.count() == 0


def test_the_answer_needs_csrf_and_the_role(policy_admin, auditor, operator, clock):
    rubric(policy_admin)
    item = refund_item_made(clock)
    url = reverse("reviews:audit_rubric_answer", args=[item.pk])

    forged = client_for(auditor, enforce_csrf_checks=True).post(url, FORM)
    operator_answer = client_for(operator).post(url, FORM)
    adjudication = client_for(auditor).post(
        reverse("reviews:audit_adjudicate", args=[item.pk]), FORM
    )

    assert (forged.status_code, operator_answer.status_code, adjudication.status_code) == (
        403,
        403,
        403,
    )
    assert RubricReview.objects.count() == 0


def test_a_disputed_item_is_in_the_lane_and_a_senior_auditor_settles_it_on_its_page(
    policy_admin, auditor, ben, senior_auditor, clock
):
    rubric(policy_admin)
    item = refund_item_made(clock)
    rubric_review_submit(item_id=item.pk, actor=ben, answers=answers(), verdict="ok")
    rubric_review_submit(
        item_id=item.pk, actor=auditor, answers=answers(cause="delay"), verdict="ok"
    )
    senior = client_for(senior_auditor)

    lane = senior.get(reverse("reviews:adjudication")).content.decode()
    page = senior.get(reverse("reviews:audit_rubric", args=[item.pk])).content.decode()
    settled = senior.post(reverse("reviews:audit_adjudicate", args=[item.pk]), FORM)

    assert reverse("reviews:audit_rubric", args=[item.pk]) in lane
    assert "Settle the item" in page and "delay" in page
    assert settled.status_code == 302
    item.refresh_from_db()
    assert item.status == AuditStatus.OK
    assert Decision.objects.filter(action="reviews.rubric.adjudicated").count() == 1


def test_a_policy_admin_defines_and_attaches_a_rubric_on_the_rubrics_page(policy_admin, auditor):
    client = client_for(policy_admin)

    bad = client.post(reverse("reviews:rubric_create"), {"name": "Bad", "items": "[{"})
    made = client.post(
        reverse("reviews:rubric_create"), {"name": "Refund quality", "items": json.dumps(ITEMS)}
    )
    rubric_id = Rubric.objects.get().pk
    attached = client.post(
        reverse("reviews:rubric_attach"),
        {"rubric": rubric_id, "agent": "refund", "rule": "", "reviews_required": 3},
    )
    refused = client_for(auditor).post(
        reverse("reviews:rubric_create"), {"name": "Mine", "items": json.dumps(ITEMS)}
    )
    page = client_for(auditor).get(reverse("reviews:rubrics")).content.decode()

    assert bad.status_code == 400 and "The items are not JSON" in bad.content.decode()
    assert made.status_code == 302 and attached.status_code == 302 and refused.status_code == 403
    assert RubricQueue.objects.get().reviews_required == 3
    assert (
        "Refund quality" in page
        and '<span translate="no">refund</span> / any rule (3 reviews per item)' in page
    )
    assert "Define a rubric" not in page


def test_the_dashboard_shows_the_agreement_per_rubric_item(policy_admin, auditor, ben, clock):
    rubric(policy_admin)
    for a, b in [("pass", "pass"), ("pass", "pass"), ("fail", "fail"), ("pass", "fail")]:
        item = refund_item_made(clock)
        rubric_review_submit(
            item_id=item.pk, actor=auditor, answers=answers(correct=a), verdict="ok"
        )
        rubric_review_submit(item_id=item.pk, actor=ben, answers=answers(correct=b), verdict="ok")

    page = client_for(policy_admin).get(reverse("reviews:dashboard")).content.decode()
    section = page[page.index('id="rubric-agreement"') :]
    section = section[: section.index("</section>")]
    row = section[section.index("The refund is correct") :]
    row = row[: row.index("</tr>")]

    assert "2 reviews per item, 4 items, 1 disputed" in section
    assert "Cohen's κ" in row and "0.500" in row
    assert "n/a" in section[section.index("Tone of the email") :]


def test_the_decision_log_filters_rubric_decisions(policy_admin, auditor, clock):
    rubric(policy_admin)
    item = refund_item_made(clock)
    rubric_review_submit(item_id=item.pk, actor=auditor, answers=answers(), verdict="ok")
    email = AuditItem.objects.get(task=item.task, tool="email_customer")
    audit_item_review(item_id=email.pk, actor=auditor, verdict="ok")

    page = client_for(auditor).get(reverse("reviews:decisions"), {"action": "reviews.rubric"})
    shown = page.content.decode()

    assert page.status_code == 200
    assert shown.count("rubric answered") >= 1 and "rubric created" in shown
    assert "rubric attached" in shown and "audit ok" not in shown
