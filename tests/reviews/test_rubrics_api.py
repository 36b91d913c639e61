"""Rubric reviews through the JSON API: the same services, roles and checks as the pages, each
write one decision logged with the API as its channel."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agentops.models import AuditItem
from agentops.states import AuditStatus
from agentops.tokens import api_token_create
from reviews.models import Decision, Rubric, RubricReview
from tests.reviews.conftest import make_user
from tests.reviews.test_rubrics import ITEMS, answers, refund_item_made

pytestmark = pytest.mark.django_db


def api_client(user: Any) -> Client:
    _, token = api_token_create(user=user, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1{path}", body, content_type="application/json")


@pytest.fixture
def people(groups: Any, django_user_model: Any) -> dict[str, Any]:
    return {
        "paula": make_user(django_user_model, "paula", "policy admins"),
        "ann": make_user(django_user_model, "ann", "auditors"),
        "ben": make_user(django_user_model, "ben", "auditors"),
        "sam": make_user(django_user_model, "sam", "senior auditors"),
        "otto": make_user(django_user_model, "otto", "operators"),
    }


def rubric_made(client: Client, *, reviews: int = 2) -> dict[str, Any]:
    made = post(client, "/rubrics", {"name": "Refund quality", "items": ITEMS})
    assert made.status_code == 201, made.content
    rubric = made.json()
    queue = post(
        client,
        f"/rubrics/{rubric['id']}/queues",
        {"agent": "refund", "rule": "small payment", "reviews_required": reviews},
    )
    assert queue.status_code == 200, queue.content
    return rubric


def test_a_policy_admin_defines_and_attaches_a_rubric_others_may_not(people):
    refused = post(api_client(people["ann"]), "/rubrics", {"name": "Mine", "items": ITEMS})
    bad = post(api_client(people["paula"]), "/rubrics", {"name": "Bad", "items": [{"kind": "x"}]})
    rubric = rubric_made(api_client(people["paula"]))

    assert refused.status_code == 403 and bad.status_code == 400
    assert "items[0]" in bad.json()["detail"]
    assert [i["key"] for i in rubric["items"]] == ["correct", "tone", "cause"]
    assert rubric["items"][1]["values"][0] == {"value": 1, "description": "rude"}
    listed = api_client(people["otto"]).get("/api/v1/rubrics").json()
    assert [(r["name"], [q["rule"] for q in r["queues"]]) for r in listed] == [
        ("Refund quality", ["small payment"])
    ]
    assert Rubric.objects.count() == 1
    logged = Decision.objects.filter(action__startswith="reviews.rubric.").order_by("id")
    assert [(d.action, d.channel) for d in logged] == [
        ("reviews.rubric.created", "api"),
        ("reviews.rubric.attached", "api"),
    ]
    missing = post(api_client(people["paula"]), "/rubrics/999999/queues", {"agent": "refund"})
    assert missing.status_code == 404


def test_two_auditors_answer_independently_disagree_and_a_senior_auditor_settles(people, clock):
    rubric_made(api_client(people["paula"]))
    item = refund_item_made(clock)
    ann, ben, sam = (api_client(people[n]) for n in ("ann", "ben", "sam"))
    path = f"/audit/{item.pk}/rubric"

    first = post(ann, path, {"answers": answers(), "verdict": "ok"})
    assert first.status_code == 200, first.content
    assert first.json()["reviews_given"] == 1 and first.json()["reviewed_by_you"] is True
    unseen = ben.get(f"/api/v1{path}").json()
    assert unseen["reviews_given"] == 1 and unseen["reviews"] == []
    again = post(ann, path, {"answers": answers(), "verdict": "ok"})
    assert again.status_code == 400 and "already" in again.json()["detail"]

    second = post(
        ben, path, {"answers": answers(correct="fail"), "verdict": "flagged", "note": "x"}
    )
    assert second.status_code == 200
    seen = second.json()
    assert seen["status"] == "disputed"
    assert [(r["reviewer"], r["answers"]["correct"]) for r in seen["reviews"]] == [
        ("ann", "pass"),
        ("ben", "fail"),
    ]
    lane = sam.get("/api/v1/audit/adjudication").json()
    assert [entry["item_id"] for entry in lane] == [item.pk]
    refused = post(ann, f"/audit/{item.pk}/adjudicate", {"answers": answers(), "verdict": "ok"})
    settled = post(sam, f"/audit/{item.pk}/adjudicate", {"answers": answers(), "verdict": "ok"})

    assert refused.status_code == 403
    assert settled.status_code == 200 and settled.json()["status"] == "adjudicated"
    assert sam.get("/api/v1/audit/adjudication").json() == []
    assert AuditItem.objects.get(pk=item.pk).status == AuditStatus.OK
    assert RubricReview.objects.count() == 3
    logged = Decision.objects.filter(task_id_ref=item.task_id).order_by("id")
    assert [(d.action, d.actor_label, d.channel) for d in logged] == [
        ("reviews.rubric.answered", "ann", "api"),
        ("reviews.rubric.answered", "ben", "api"),
        ("reviews.rubric.adjudicated", "sam", "api"),
    ]


def test_an_operator_reads_but_does_not_answer_and_bad_answers_are_400(people, clock):
    rubric_made(api_client(people["paula"]))
    item = refund_item_made(clock)
    path = f"/audit/{item.pk}/rubric"

    refused = post(api_client(people["otto"]), path, {"answers": answers(), "verdict": "ok"})
    bad = post(api_client(people["ann"]), path, {"answers": {"correct": "maybe"}, "verdict": "ok"})
    missing = post(
        api_client(people["ann"]), "/audit/999999/rubric", {"answers": {}, "verdict": "ok"}
    )
    email = AuditItem.objects.get(task=item.task, tool="email_customer")
    no_rubric = api_client(people["otto"]).get(f"/api/v1/audit/{email.pk}/rubric")

    assert refused.status_code == 403
    assert (
        bad.status_code == 400
        and "The refund is correct: one of pass, fail" in bad.json()["detail"]
    )
    assert missing.status_code == 404 and no_rubric.status_code == 404
    assert RubricReview.objects.count() == 0


def test_the_agreement_figures_per_queue_and_rubric_item(people, clock):
    rubric_made(api_client(people["paula"]))
    ann, ben = api_client(people["ann"]), api_client(people["ben"])
    for a, b in [("pass", "pass"), ("pass", "pass"), ("fail", "fail"), ("pass", "fail")]:
        item = refund_item_made(clock)
        post(ann, f"/audit/{item.pk}/rubric", {"answers": answers(correct=a), "verdict": "ok"})
        post(ben, f"/audit/{item.pk}/rubric", {"answers": answers(correct=b), "verdict": "ok"})

    (queue,) = api_client(people["otto"]).get("/api/v1/rubrics/agreement").json()
    by_key = {i["key"]: i for i in queue["items"]}

    assert (queue["rubric"], queue["reviews_required"], queue["cases"], queue["disputed"]) == (
        "Refund quality",
        2,
        4,
        1,
    )
    assert by_key["correct"] == {
        "key": "correct",
        "label": "The refund is correct",
        "kind": "pass_fail",
        "measure": "cohen_kappa",
        "value": 0.5,
        "items": 4,
        "answers": 8,
    }
    assert by_key["tone"]["value"] is None
