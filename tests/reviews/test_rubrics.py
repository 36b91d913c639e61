"""Rubric reviews of the audit queue: defining and attaching rubrics, independent answers by
several auditors, settling by agreement or by a senior auditor, the agreement figures, each
write one entry in the decision log."""

from __future__ import annotations

from typing import Any

import pytest

from agentops.engine import digest
from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.models import AuditCase, Decision, Rubric, RubricItem, RubricQueue, RubricReview
from reviews.selectors.rubrics import rubric_agreement, rubric_state_get
from reviews.services import (
    NotAllowed,
    ReviewError,
    audit_item_review,
    audit_items_bulk_review,
    rubric_adjudicate,
    rubric_create,
    rubric_queue_attach,
    rubric_review_submit,
)
from reviews.states import CaseStatus
from tests.reviews.conftest import make_user
from tests.reviews.history import make_audit_item, make_task

pytestmark = pytest.mark.django_db

ITEMS: list[dict[str, Any]] = [
    {
        "key": "correct",
        "label": "The refund is correct",
        "kind": "pass_fail",
        "values": [
            {"value": "pass", "description": "amount and order match the request"},
            {"value": "fail", "description": "wrong amount or order"},
        ],
    },
    {
        "key": "tone",
        "label": "Tone of the email",
        "kind": "score",
        "required": False,
        "values": [
            {"value": 1, "description": "rude"},
            {"value": 2, "description": "neutral"},
            {"value": 3, "description": "kind"},
        ],
    },
    {
        "key": "cause",
        "label": "Cause",
        "kind": "category",
        "values": [
            {"value": "damage", "description": "the goods arrived damaged"},
            {"value": "delay", "description": "the goods arrived late"},
        ],
    },
]


def rubric(admin: Any, *, reviews: int = 2, rule: str = "small payment") -> RubricQueue:
    made = rubric_create(actor=admin, name="Refund quality", items=ITEMS, instructions="Check it")
    return rubric_queue_attach(
        actor=admin, rubric_id=made.pk, agent="refund", rule=rule, reviews_required=reviews
    )


def answers(correct: str = "pass", tone: int | None = 3, cause: str = "damage") -> dict[str, Any]:
    return {"correct": correct, "tone": tone, "cause": cause}


@pytest.fixture
def auditors(groups: Any, django_user_model: Any) -> list[Any]:
    return [make_user(django_user_model, name, "auditors") for name in ("ann", "ben", "cy")]


def refund_item_made(clock: Any) -> AuditItem:
    """A refund's two audit items, built as rows (its refund under `small payment`, its email
    under `notification`); the refund's."""
    task = make_task(clock)
    make_audit_item(clock, task, rule="notification", tool="email_customer")
    return make_audit_item(clock, task)


@pytest.fixture
def refund_item(clock: Any) -> AuditItem:
    return refund_item_made(clock)


def test_rubric_create_stores_typed_items_and_logs_one_decision(policy_admin):
    made = rubric_create(actor=policy_admin, name="Refund quality", items=ITEMS)

    items = list(RubricItem.objects.filter(rubric=made).order_by("position"))
    assert [(i.key, i.kind, i.required) for i in items] == [
        ("correct", "pass_fail", True),
        ("tone", "score", False),
        ("cause", "category", True),
    ]
    assert [v["value"] for v in items[1].values] == [1, 2, 3]
    (decision,) = Decision.objects.all()
    assert decision.action == "reviews.rubric.created" and decision.actor == policy_admin


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"kind": "colour"}, "items[0].kind"),
        ({"values": [{"value": "pass", "description": "ok"}]}, "pass/fail has the values"),
        ({"values": [{"value": "pass"}, {"value": "fail", "description": "x"}]}, "description"),
        (
            {
                "kind": "score",
                "values": [{"value": 1, "description": "a"}, {"value": 3, "description": "b"}],
            },
            "consecutive",
        ),
        ({"key": "Bad Key"}, "items[0].key"),
        ({"extra": 1}, "unknown field 'extra'"),
    ],
)
def test_rubric_create_refuses_an_item_that_does_not_fit_and_writes_nothing(
    policy_admin, change, error
):
    with pytest.raises(ReviewError, match=error.replace("[", r"\[").replace("]", r"\]")):
        rubric_create(actor=policy_admin, name="Bad", items=[{**ITEMS[0], **change}])

    assert Rubric.objects.count() == 0 and Decision.objects.count() == 0


def test_only_policy_admins_define_and_attach_rubrics(auditor, policy_admin):
    with pytest.raises(NotAllowed):
        rubric_create(actor=auditor, name="Mine", items=ITEMS)
    made = rubric_create(actor=policy_admin, name="Theirs", items=ITEMS)
    with pytest.raises(NotAllowed):
        rubric_queue_attach(actor=auditor, rubric_id=made.pk, agent="refund")
    assert RubricQueue.objects.count() == 0


def test_attaching_again_replaces_the_scope_and_keeps_open_cases_as_they_started(
    policy_admin, refund_item, auditors
):
    queue = rubric(policy_admin, reviews=2)
    rubric_review_submit(item_id=refund_item.pk, actor=auditors[0], answers=answers(), verdict="ok")
    again = rubric_queue_attach(
        actor=policy_admin,
        rubric_id=queue.rubric_id,
        agent="refund",
        rule="small payment",
        reviews_required=3,
    )

    assert again.pk == queue.pk and again.reviews_required == 3
    assert AuditCase.objects.get().reviews_required == 2
    assert Decision.objects.filter(action="reviews.rubric.attached").count() == 2


def test_two_reviewers_who_agree_settle_the_item(policy_admin, refund_item, auditors):
    rubric(policy_admin, reviews=2)
    ann, ben, _ = auditors

    first = rubric_review_submit(
        item_id=refund_item.pk, actor=ann, answers=answers(), verdict="ok", note="fine"
    )
    assert first.status == CaseStatus.COLLECTING
    refund_item.refresh_from_db()
    assert refund_item.status == AuditStatus.PENDING
    case = rubric_review_submit(item_id=refund_item.pk, actor=ben, answers=answers(), verdict="ok")

    refund_item.refresh_from_db()
    assert case.status == CaseStatus.AGREED and case.settled_at is not None
    assert refund_item.status == AuditStatus.OK and refund_item.reviewed_by == ben
    assert RubricReview.objects.filter(case=case).count() == 2
    logged = list(Decision.objects.filter(action="reviews.rubric.answered").order_by("id"))
    assert [(d.actor_label, d.detail["review"], d.detail["case_status"]) for d in logged] == [
        ("ann", 1, "collecting"),
        ("ben", 2, "agreed"),
    ]
    assert logged[1].detail["answers"] == answers() and logged[0].task_id_ref == refund_item.task_id
    # While ben had yet to answer, the log (which he reads) held ann's answers' digest only.
    assert "answers" not in logged[0].detail and "verdict" not in logged[0].detail
    ann_review = RubricReview.objects.get(pk=logged[0].detail["rubric_review"])
    assert logged[0].reason == "" and ann_review.note == "fine"
    assert logged[0].after_digest == digest(
        {"answers": answers(), "verdict": "ok", "note": "fine", "correction": ""}
    )


def test_a_case_takes_no_review_twice_from_one_person_nor_beyond_its_count(
    policy_admin, refund_item, auditors
):
    rubric(policy_admin, reviews=2)
    ann, ben, cy = auditors
    rubric_review_submit(item_id=refund_item.pk, actor=ann, answers=answers(), verdict="ok")

    with pytest.raises(ReviewError, match="already"):
        rubric_review_submit(item_id=refund_item.pk, actor=ann, answers=answers(), verdict="ok")
    rubric_review_submit(item_id=refund_item.pk, actor=ben, answers=answers(), verdict="ok")
    with pytest.raises(ReviewError, match="has all its reviews"):
        rubric_review_submit(item_id=refund_item.pk, actor=cy, answers=answers(), verdict="ok")

    assert RubricReview.objects.count() == 2
    assert Decision.objects.filter(action="reviews.rubric.answered").count() == 2


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"tone": 3, "cause": "damage"}, "The refund is correct: an answer is required"),
        ({**answers(), "tone": 7}, "Tone of the email: one of 1, 2, 3"),
        ({**answers(), "cause": "weather"}, "Cause: one of damage, delay"),
        ({**answers(), "speed": 1}, "no item 'speed'"),
    ],
)
def test_answers_that_do_not_fit_the_rubric_are_refused_and_nothing_is_written(
    policy_admin, refund_item, auditors, given, error
):
    rubric(policy_admin)
    with pytest.raises(ReviewError, match=error):
        rubric_review_submit(item_id=refund_item.pk, actor=auditors[0], answers=given, verdict="ok")

    assert RubricReview.objects.count() == 0 and AuditCase.objects.count() == 0
    assert Decision.objects.filter(action="reviews.rubric.answered").count() == 0


def test_a_flag_needs_a_note_and_optional_items_may_be_left_out(
    policy_admin, refund_item, auditors
):
    rubric(policy_admin, reviews=1)
    with pytest.raises(ReviewError, match="a flag needs a note"):
        rubric_review_submit(
            item_id=refund_item.pk, actor=auditors[0], answers=answers(), verdict="flagged"
        )
    case = rubric_review_submit(
        item_id=refund_item.pk,
        actor=auditors[0],
        answers={"correct": "fail", "cause": "delay"},
        verdict="flagged",
        note="refunded twice the amount",
        correction='{"amount": 56.0}',
    )

    review = RubricReview.objects.get()
    refund_item.refresh_from_db()
    assert case.status == CaseStatus.AGREED and review.answers == {
        "correct": "fail",
        "cause": "delay",
    }
    assert review.correction == '{"amount": 56.0}'
    assert (
        refund_item.status == AuditStatus.FLAGGED
        and refund_item.note == "refunded twice the amount"
    )


def test_disagreeing_reviewers_send_the_item_to_a_senior_auditor(
    policy_admin, refund_item, auditors, senior_auditor
):
    rubric(policy_admin, reviews=2)
    ann, ben, _ = auditors
    rubric_review_submit(item_id=refund_item.pk, actor=ann, answers=answers(), verdict="ok")
    case = rubric_review_submit(
        item_id=refund_item.pk, actor=ben, answers=answers(tone=2), verdict="ok"
    )
    refund_item.refresh_from_db()
    assert case.status == CaseStatus.DISPUTED and refund_item.status == AuditStatus.PENDING

    with pytest.raises(NotAllowed):
        rubric_adjudicate(item_id=refund_item.pk, actor=ann, answers=answers(), verdict="ok")
    case = rubric_adjudicate(
        item_id=refund_item.pk,
        actor=senior_auditor,
        answers=answers(tone=2),
        verdict="ok",
        note="neutral is right",
    )

    refund_item.refresh_from_db()
    assert case.status == CaseStatus.ADJUDICATED
    assert refund_item.status == AuditStatus.OK and refund_item.reviewed_by == senior_auditor
    (decision,) = Decision.objects.filter(action="reviews.rubric.adjudicated")
    assert decision.actor == senior_auditor and decision.detail["answers"] == answers(tone=2)
    with pytest.raises(ReviewError, match="not waiting for adjudication"):
        rubric_adjudicate(
            item_id=refund_item.pk, actor=senior_auditor, answers=answers(), verdict="ok"
        )


def test_a_senior_auditor_who_reviewed_the_item_does_not_adjudicate_it(
    policy_admin, refund_item, auditors, senior_auditor
):
    rubric(policy_admin, reviews=2)
    rubric_review_submit(
        item_id=refund_item.pk, actor=senior_auditor, answers=answers(), verdict="ok"
    )
    rubric_review_submit(
        item_id=refund_item.pk, actor=auditors[0], answers=answers(correct="fail"), verdict="ok"
    )

    with pytest.raises(NotAllowed, match="another senior auditor"):
        rubric_adjudicate(
            item_id=refund_item.pk, actor=senior_auditor, answers=answers(), verdict="ok"
        )
    assert RubricReview.objects.filter(adjudication=True).count() == 0


def test_others_answers_are_hidden_until_one_has_submitted(policy_admin, refund_item, auditors):
    rubric(policy_admin, reviews=3)
    ann, ben, cy = auditors
    rubric_review_submit(item_id=refund_item.pk, actor=ann, answers=answers(), verdict="ok")

    before = rubric_state_get(item=refund_item, user=ben)
    assert before is not None and before.given == 1 and before.required == 3
    assert not before.visible and before.may_review and not before.mine
    rubric_review_submit(item_id=refund_item.pk, actor=ben, answers=answers(), verdict="ok")
    after = rubric_state_get(item=refund_item, user=ben)
    assert after is not None and after.visible and after.mine and not after.may_review
    assert not rubric_state_get(item=refund_item, user=cy).visible  # type: ignore[union-attr]


def test_an_item_under_a_rubric_is_not_marked_with_one_bit(policy_admin, refund_item, auditor):
    rubric(policy_admin)
    email = AuditItem.objects.get(task=refund_item.task, tool="email_customer")

    with pytest.raises(ReviewError, match="rubric"):
        audit_item_review(item_id=refund_item.pk, actor=auditor, verdict="ok")
    done = audit_items_bulk_review(item_ids=[refund_item.pk, email.pk], actor=auditor, verdict="ok")

    refund_item.refresh_from_db()
    email.refresh_from_db()
    assert (
        done == 1 and refund_item.status == AuditStatus.PENDING and email.status == AuditStatus.OK
    )


def test_an_item_no_rubric_takes_is_refused(policy_admin, refund_item, auditor):
    rubric(policy_admin, rule="notification")

    with pytest.raises(ReviewError, match="no rubric"):
        rubric_review_submit(item_id=refund_item.pk, actor=auditor, answers=answers(), verdict="ok")


def test_the_most_specific_queue_takes_the_item(policy_admin, refund_item, auditor):
    made = rubric_create(actor=policy_admin, name="Refund quality", items=ITEMS)
    other = rubric_create(actor=policy_admin, name="Any refund", items=ITEMS[:1])
    rubric_queue_attach(actor=policy_admin, rubric_id=other.pk, agent="refund")
    specific = rubric_queue_attach(
        actor=policy_admin, rubric_id=made.pk, agent="refund", rule="small payment"
    )

    state = rubric_state_get(item=refund_item, user=auditor)
    assert state is not None and state.queue == specific and state.rubric == made


def test_agreement_per_rubric_item_is_cohen_kappa_for_two_reviewers(policy_admin, auditors, clock):
    """Four items, two reviewers: `correct` agrees on 3 of 4 (pass/pass, pass/pass, fail/fail,
    pass/fail): p_o = 3/4, p_e = (3/4)(2/4) + (1/4)(2/4) = 1/2, kappa = 0.5. `cause` always
    agrees on two categories: kappa 1. `tone` is the same score everywhere: chance explains
    it, so no figure."""
    rubric(policy_admin, reviews=2)
    ann, ben, _ = auditors
    pairs = [("pass", "pass"), ("pass", "pass"), ("fail", "fail"), ("pass", "fail")]
    causes = ["damage", "delay", "damage", "delay"]
    for (a, b), cause in zip(pairs, causes, strict=True):
        item = refund_item_made(clock)
        for who, value in ((ann, a), (ben, b)):
            rubric_review_submit(
                item_id=item.pk,
                actor=who,
                answers=answers(correct=value, cause=cause),
                verdict="ok",
            )

    (queue,) = rubric_agreement()
    figures = {i.key: i.agreement for i in queue.items}
    assert queue.cases == 4 and queue.disputed == 1
    assert figures["correct"].measure == "cohen_kappa" and figures["correct"].items == 4
    assert figures["correct"].value == pytest.approx(0.5)
    assert figures["cause"].value == pytest.approx(1.0)
    assert figures["tone"].value is None


def test_a_rubric_attached_later_leaves_the_items_already_reviewed_as_they_were(
    policy_admin, refund_item, auditors
):
    ann, ben, _ = auditors
    audit_item_review(item_id=refund_item.pk, actor=ann, verdict="ok")
    rubric(policy_admin, reviews=2)

    with pytest.raises(ReviewError, match="marked ok before a rubric was attached"):
        rubric_review_submit(item_id=refund_item.pk, actor=ben, answers=answers(), verdict="ok")
    audit_item_review(item_id=refund_item.pk, actor=ben, verdict="flagged", note="wrong amount")

    refund_item.refresh_from_db()
    assert refund_item.status == AuditStatus.FLAGGED and not AuditCase.objects.exists()
    assert rubric_state_get(item=refund_item, user=ben) is None
