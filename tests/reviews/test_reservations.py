"""Reservations of the audit queue: an auditor takes a batch for a stated time; nobody else
reviews those items meanwhile; what they leave goes back to the queue when the time is up; each
batch taken and given back is one decision."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agentops.models import AuditItem
from agentops.states import AuditStatus
from agentops.tokens import api_token_create
from reviews.models import AuditReservation, Decision
from reviews.services import (
    ReservedByOther,
    ReviewError,
    audit_batch_release,
    audit_batch_reserve,
    audit_item_review,
    audit_items_bulk_review,
    rubric_review_submit,
)
from tests.reviews.builders import client_for
from tests.reviews.conftest import make_user
from tests.reviews.history import T0, make_audit_item, make_task
from tests.reviews.test_rubrics import answers, rubric

pytestmark = pytest.mark.django_db


@pytest.fixture
def ben(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "ben", "auditors")


def items_made(clock: Any, n: int) -> list[AuditItem]:
    """`n` audit items, one minute apart (oldest first)."""
    task = make_task(clock)
    return [make_audit_item(clock, task, at=T0 + timedelta(minutes=i)) for i in range(n)]


def held_by(user: Any) -> set[int]:
    return set(AuditReservation.objects.filter(holder=user).values_list("audit_item_id", flat=True))


def test_two_auditors_take_different_batches_oldest_first(auditor, ben, clock):
    items = items_made(clock, 5)
    clock.at(T0 + timedelta(hours=1))

    mine = audit_batch_reserve(actor=auditor, size=3, minutes=30)
    theirs = audit_batch_reserve(actor=ben, size=3, minutes=30)

    assert [r.audit_item_id for r in mine] == [i.pk for i in items[:3]]
    assert [r.audit_item_id for r in theirs] == [i.pk for i in items[3:]]
    # A second click on "Take a batch": the one ben holds is his batch; nothing more is taken.
    with pytest.raises(ReviewError, match="you hold a batch of 2 items until"):
        audit_batch_reserve(actor=ben, size=3, minutes=30)
    assert held_by(ben) == {i.pk for i in items[3:]}
    assert mine[0].until == T0 + timedelta(hours=1, minutes=30)
    logged = Decision.objects.filter(action="reviews.reservation.taken").order_by("id")
    assert [(d.actor_label, d.detail["items"]) for d in logged] == [
        ("audrey", [i.pk for i in items[:3]]),
        ("ben", [i.pk for i in items[3:]]),
    ]


def test_nobody_else_reviews_a_held_item_and_the_holders_review_ends_the_hold(auditor, ben, clock):
    first, second = items_made(clock, 2)
    audit_batch_reserve(actor=auditor, size=2, minutes=30)

    with pytest.raises(ReservedByOther, match="audrey took this item in a batch until"):
        audit_item_review(item_id=first.pk, actor=ben, verdict="ok")
    done = audit_items_bulk_review(item_ids=[first.pk, second.pk], actor=ben, verdict="ok")
    assert done == 0
    audit_item_review(item_id=first.pk, actor=auditor, verdict="ok")

    first.refresh_from_db()
    assert first.status == AuditStatus.OK and held_by(auditor) == {second.pk}
    assert Decision.objects.filter(action="reviews.audit.ok").count() == 1


def test_what_the_holder_leaves_goes_back_to_the_queue_when_the_time_is_up(auditor, ben, clock):
    first, second = items_made(clock, 2)
    audit_batch_reserve(actor=auditor, size=2, minutes=30)
    audit_item_review(item_id=first.pk, actor=auditor, verdict="ok")

    clock.at(T0 + timedelta(minutes=29))
    with pytest.raises(ReservedByOther):
        audit_item_review(item_id=second.pk, actor=ben, verdict="ok")
    assert audit_batch_reserve(actor=ben, size=5, minutes=10) == []
    clock.at(T0 + timedelta(minutes=31))
    taken = audit_batch_reserve(actor=ben, size=5, minutes=10)

    assert [r.audit_item_id for r in taken] == [second.pk]
    assert held_by(auditor) == set() and held_by(ben) == {second.pk}
    audit_item_review(item_id=second.pk, actor=ben, verdict="ok")
    assert AuditItem.objects.filter(status=AuditStatus.PENDING).count() == 0


def test_giving_a_batch_back_frees_it_at_once_and_logs_once(auditor, ben, clock):
    items_made(clock, 3)
    audit_batch_reserve(actor=auditor, size=3, minutes=60)

    assert audit_batch_release(actor=auditor) == 3
    assert audit_batch_release(actor=auditor) == 0
    assert len(audit_batch_reserve(actor=ben, size=3, minutes=60)) == 3
    assert Decision.objects.filter(action="reviews.reservation.released").count() == 1


@pytest.mark.parametrize(("size", "minutes"), [(0, 30), (51, 30), (5, 0), (5, 481)])
def test_a_batch_out_of_bounds_is_refused_and_takes_nothing(auditor, clock, size, minutes):
    items_made(clock, 2)

    with pytest.raises(ReviewError, match="a batch is"):
        audit_batch_reserve(actor=auditor, size=size, minutes=minutes)
    assert AuditReservation.objects.count() == 0 and Decision.objects.count() == 0


def test_a_rubric_item_goes_back_for_its_next_reviewer_after_each_review(
    policy_admin, auditor, ben, clock
):
    rubric(policy_admin, reviews=2)
    (item,) = items_made(clock, 1)
    audit_batch_reserve(actor=auditor, size=5, minutes=30)
    with pytest.raises(ReservedByOther):
        rubric_review_submit(item_id=item.pk, actor=ben, answers=answers(), verdict="ok")
    rubric_review_submit(item_id=item.pk, actor=auditor, answers=answers(), verdict="ok")

    assert audit_batch_reserve(actor=auditor, size=5, minutes=30) == []
    assert [r.audit_item_id for r in audit_batch_reserve(actor=ben, size=5, minutes=30)] == [
        item.pk
    ]


def test_the_queue_page_takes_a_batch_shows_it_and_gives_it_back(auditor, ben, clock):
    items = items_made(clock, 3)
    audit_batch_reserve(actor=ben, size=1, minutes=30)
    client = client_for(auditor)

    taken = client.post(reverse("reviews:audit_batch_take"), {"size": 5, "minutes": 20})
    page = client.get(taken["Location"]).content.decode()
    everyone = client.get(reverse("reviews:audit")).content.decode()
    back = client.post(reverse("reviews:audit_batch_release"))

    assert taken.status_code == 302 and taken["Location"].endswith("?held=mine")
    assert f'id="held-{items[1].pk}">Yours until' in page
    assert f'<tr id="audit-{items[0].pk}">' not in page
    assert f'id="held-{items[0].pk}">Taken by <span translate="no">ben</span> until' in everyone
    assert back.status_code == 302 and held_by(auditor) == set()
    refused = client_for(ben).post(reverse("reviews:audit_batch_take"), {"size": 0, "minutes": 5})
    assert refused.status_code == 302 and held_by(ben) == {items[0].pk}


def test_the_api_takes_and_gives_back_a_batch_and_lists_who_holds_what(auditor, operator, clock):
    items = items_made(clock, 2)
    _, token = api_token_create(user=auditor, name="tests")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    _, other = api_token_create(user=operator, name="tests")

    taken = client.post(
        "/api/v1/audit/batch", {"size": 1, "minutes": 15}, content_type="application/json"
    )
    listed = client.get("/api/v1/audit").json()
    refused = Client(HTTP_AUTHORIZATION=f"Bearer {other}").post(
        "/api/v1/audit/batch", {"size": 1, "minutes": 15}, content_type="application/json"
    )
    bad = client.post(
        "/api/v1/audit/batch", {"size": 1, "minutes": 9999}, content_type="application/json"
    )
    released = client.post("/api/v1/audit/batch/release")

    assert taken.status_code == 200 and taken.json()["items"] == [items[0].pk]
    assert [(i["id"], i["reserved_by"]) for i in listed] == [
        (items[0].pk, "audrey"),
        (items[1].pk, None),
    ]
    assert refused.status_code == 403 and bad.status_code == 400
    assert released.json() == {"released": 1}
    assert Decision.objects.filter(action__startswith="reviews.reservation.").count() == 2


def test_the_rubric_page_offers_no_form_while_someone_else_holds_the_item(
    policy_admin, auditor, ben, clock
):
    rubric(policy_admin, reviews=2)
    (item,) = items_made(clock, 1)
    audit_batch_reserve(actor=ben, size=1, minutes=30)

    theirs = client_for(auditor).get(reverse("reviews:audit_rubric", args=[item.pk]))
    own = client_for(ben).get(reverse("reviews:audit_rubric", args=[item.pk]))

    assert (
        'id="held-by-other"><span translate="no">ben</span> took this item in a batch until'
        in theirs.content.decode()
    )
    assert 'id="rubric-form"' not in theirs.content.decode()
    assert 'id="rubric-form"' in own.content.decode()
