"""Reviewed audit items as an evaluation dataset: JSON Lines with the step's inputs, its output,
the verdict, the rubric answers that stand and any correction; filtered by agent, rule, period
and verdict; streamed from the page and the API."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.http import StreamingHttpResponse
from django.test import Client
from django.urls import reverse

from agentops.engine.jsonvalues import ARTIFACT_KEY, offloaded
from agentops.models import AuditItem, ToolCall
from agentops.tokens import api_token_create
from reviews.selectors.datasets import DatasetFilters, dataset_rows
from reviews.services import audit_item_review, rubric_adjudicate, rubric_review_submit
from tests.reviews.builders import client_for
from tests.reviews.conftest import make_user
from tests.reviews.history import T0, make_audit_item, make_task
from tests.reviews.test_rubrics import answers, rubric

pytestmark = pytest.mark.django_db


def lines(response: Any) -> list[dict[str, Any]]:
    assert isinstance(response, StreamingHttpResponse)
    text = b"".join(response.streaming_content).decode()
    assert text.endswith("\n") or text == ""
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def reviewed(clock: Any, policy_admin: Any, auditor: Any, groups: Any, django_user_model: Any):
    """Four items: a refund under a two-review rubric the reviewers disputed and a senior
    auditor settled with a correction; a refund marked OK (no rubric: its rule has none); an
    email flagged; an email still pending. The first two on day 0, the others on day 1."""
    ben = make_user(django_user_model, "ben", "auditors")
    sam = make_user(django_user_model, "sam", "senior auditors")
    rubric(policy_admin, reviews=2)
    task = make_task(clock, input={"order_id": "A1001"})
    disputed = make_audit_item(clock, task)
    ToolCall.objects.filter(pk=disputed.tool_call_id).update(result={"status": "refunded"})
    other = make_task(clock, agent="trip")
    plain = make_audit_item(clock, other, rule="hotel")
    email = make_audit_item(
        clock, task, at=T0 + timedelta(days=1), rule="notification", tool="email_customer"
    )
    make_audit_item(
        clock, task, at=T0 + timedelta(days=1), rule="notification", tool="email_customer"
    )
    rubric_review_submit(item_id=disputed.pk, actor=auditor, answers=answers(), verdict="ok")
    rubric_review_submit(
        item_id=disputed.pk,
        actor=ben,
        answers=answers(correct="fail"),
        verdict="flagged",
        note="too much",
        correction='{"amount": 28.0}',
    )
    rubric_adjudicate(
        item_id=disputed.pk,
        actor=sam,
        answers=answers(correct="fail", tone=2),
        verdict="flagged",
        note="half was owed",
        correction='{"amount": 28.0, "reason": "half"}',
    )
    audit_item_review(item_id=plain.pk, actor=auditor, verdict="ok")
    audit_item_review(item_id=email.pk, actor=auditor, verdict="flagged", note="wrong name")
    return {"disputed": disputed, "plain": plain, "email": email}


def test_each_reviewed_item_is_a_line_with_inputs_output_answers_and_correction(reviewed, auditor):
    rows = lines(client_for(auditor).get(reverse("reviews:audit_dataset")))

    assert [r["item"] for r in rows] == [
        reviewed["disputed"].pk,
        reviewed["plain"].pk,
        reviewed["email"].pk,
    ]
    first = rows[0]
    assert first["inputs"]["goal"] == "refund task"
    assert first["inputs"]["task_input"] == {"order_id": "A1001"}
    assert first["inputs"]["arguments"] == reviewed["disputed"].tool_call.args
    assert first["inputs"]["step"] == {"number": 1, "title": "step 1"}
    assert first["output"] == {"status": "refunded"}
    assert (first["verdict"], first["rubric"], first["reviewed_by"]) == (
        "flagged",
        "Refund quality",
        "sam",
    )
    assert first["answers"] == answers(correct="fail", tone=2)
    assert first["correction"] == '{"amount": 28.0, "reason": "half"}'
    assert [(r["reviewer"], r["adjudication"]) for r in first["reviews"]] == [
        ("audrey", False),
        ("ben", False),
        ("sam", True),
    ]
    assert (rows[1]["rubric"], rows[1]["answers"], rows[1]["reviews"]) == (None, None, [])
    assert rows[2]["note"] == "wrong name"


def test_the_dataset_filters_by_agent_rule_period_and_verdict(reviewed, auditor):
    client = client_for(auditor)

    def ids(**params: Any) -> list[int]:
        return [r["item"] for r in lines(client.get(reverse("reviews:audit_dataset"), params))]

    day0, day1 = T0.date().isoformat(), (T0 + timedelta(days=1)).date().isoformat()
    assert ids(agent="trip") == [reviewed["plain"].pk]
    assert ids(rule="notification") == [reviewed["email"].pk]
    assert ids(date_from=day1) == [reviewed["email"].pk]
    assert ids(date_to=day0) == [reviewed["disputed"].pk, reviewed["plain"].pk]
    assert ids(verdict="flagged") == [reviewed["disputed"].pk, reviewed["email"].pk]
    assert ids(verdict="ok", agent="refund") == []


def test_the_dataset_is_read_in_chunks_of_three_queries(reviewed, django_assert_num_queries):
    """Chunks of two: the first (the disputed refund and the plain one) reads its items, their
    cases and the one case's reviews; the second (the email: no case, so no reviews to read)
    its items and cases, and ends the list."""
    with django_assert_num_queries(3 + 2):
        rows = list(dataset_rows(filters=DatasetFilters(), chunk_size=2))

    assert len(rows) == 3


def test_a_value_stored_as_an_artifact_is_read_back_into_the_line(reviewed, auditor, settings):
    big = {"text": "x" * 300_000}
    call = reviewed["plain"].tool_call
    pointer = offloaded(big, path="result", task_id=call.task_id)
    assert ARTIFACT_KEY in pointer
    ToolCall.objects.filter(pk=call.pk).update(result=pointer)

    (row,) = lines(client_for(auditor).get(reverse("reviews:audit_dataset"), {"agent": "trip"}))

    assert row["output"] == big


def test_the_api_streams_the_same_dataset_and_refuses_a_pending_verdict(reviewed, auditor):
    _, token = api_token_create(user=auditor, name="tests")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    answer = client.get("/api/v1/audit/dataset", {"verdict": "flagged"})
    pending = client.get("/api/v1/audit/dataset", {"verdict": "pending"})

    assert answer["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert answer["Content-Disposition"].endswith('.jsonl"')
    assert [r["item"] for r in lines(answer)] == [reviewed["disputed"].pk, reviewed["email"].pk]
    assert pending.status_code == 422
    page = client_for(auditor).get(reverse("reviews:audit"), {"status": "flagged"})
    assert f"{reverse('reviews:audit_dataset')}?verdict=flagged" in page.content.decode()
    assert AuditItem.objects.filter(status="pending").count() == 1


@pytest.mark.parametrize("query", [{"verdict": "bogus"}, {"date_from": "notadate"}])
def test_the_page_refuses_a_filter_that_does_not_parse_instead_of_exporting_everything(
    reviewed, auditor, query
):
    answer = client_for(auditor).get(reverse("reviews:audit_dataset"), query)

    assert answer.status_code == 400
    assert next(iter(query)) in answer.content.decode()
    assert not answer.streaming
