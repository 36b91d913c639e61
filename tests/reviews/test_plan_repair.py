"""Plan repair from the recovery panel and the API: operators only, CSRF on the POST, a preview
before the change, the change bound to the plan previewed (a second submit is refused), one
Decision with the diff per change, and what people type rendered escaped whatever it holds."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse
from django.utils.html import escape
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentops.engine import task_create
from agentops.models import Step, Task
from agentops.states import StepStatus, TaskStatus
from agentops.tokens import api_token_create
from reviews.models import Decision
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import client_for

pytestmark = pytest.mark.django_db


def sold_out_trip(*, created_by: Any = None) -> Task:
    """A trip stopped on a conflict: its hotel (H0404) is fully booked; the flight is booked."""
    task = task_create(
        agent="trip",
        goal="Trip to Rome",
        input={"traveller": "Ada", "hotel_id": "H0404"},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def repair(client: Any, task_id: int, **fields: Any) -> Any:
    data = {"op": "instruct", "step": "3", "reason": "sold out", "intent": "preview", **fields}
    return client.post(reverse("reviews:plan_repair", args=[task_id]), data)


def seen_digest(page: str) -> str:
    found = re.search(r'name="seen_digest" value="([0-9a-f]{64})"', page)
    assert found, "the preview carries the digest of the plan it showed"
    return found.group(1)


def test_the_panel_offers_the_repair_recommended_for_a_logic_failure(
    sim, redis_clean, operator, starter
):
    task = sold_out_trip(created_by=starter)

    page = client_for(operator).get(reverse("reviews:recover", args=[task.pk])).content.decode()

    assert 'id="repair-heading"' in page
    section = page[page.index('id="repair-heading"') :]
    assert "recommended" in section[:200]
    assert 'Current strategy: <strong translate="no">default</strong>' in section
    assert '<code translate="no">flight_only</code>' in section
    assert "Instruction can change</dt><dd>3, 4</dd>" in section
    assert "A new step can be</dt><dd>4, 5</dd>" in section


def test_preview_then_apply_logs_one_decision_with_the_diff(sim, redis_clean, operator, starter):
    task = sold_out_trip(created_by=starter)
    client = client_for(operator)

    preview = repair(client, task.pk, instruction="Book hotel H7000 instead.")
    page = preview.content.decode()

    assert preview.status_code == 200
    assert 'id="repair-preview"' in page and "Runs next:" in page
    assert (
        'instruction <span translate="no">&#x27;&#x27;</span> -&gt; '
        '<span translate="no">&#x27;Book hotel H7000 instead.&#x27;</span>'
    ) in page
    assert not Decision.objects.exists()
    assert "instruction" not in Step.objects.get(task=task, ordinal=2).spec

    applied = repair(
        client,
        task.pk,
        instruction="Book hotel H7000 instead.",
        intent="apply",
        seen_digest=seen_digest(page),
        then_retry="on",
    )

    assert applied.status_code == 302
    assert applied["Location"] == reverse("agentops:task_detail", args=[task.pk])
    decision = Decision.objects.get()
    assert decision.action == "reviews.plan.repaired"
    assert (decision.actor_label, decision.reason, decision.channel) == (
        "olga",
        "sold out",
        "browser",
    )
    assert decision.before_digest != decision.after_digest
    assert decision.detail["changes"][0]["after"] == "Book hotel H7000 instead."
    assert decision.detail["then"] == "retry"
    assert decision.detail["runs"] == ["3 Book the hotel", "4 Send the itinerary"]
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED, task.failure


def test_a_second_submit_of_the_same_change_is_refused_and_logs_nothing(
    sim, redis_clean, operator, starter
):
    task = sold_out_trip(created_by=starter)
    client = client_for(operator)
    digest = seen_digest(repair(client, task.pk, step="4", instruction="Say hi.").content.decode())
    fields = {"step": "4", "instruction": "Say hi.", "intent": "apply", "seen_digest": digest}

    first = repair(client, task.pk, **fields)
    second = repair(client, task.pk, **fields)

    assert first.status_code == 302 and first["Location"] == reverse(
        "reviews:recover", args=[task.pk]
    )
    assert second.status_code == 409
    assert "changed since you saw it" in second.content.decode()
    assert Decision.objects.count() == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"intent": "apply"}, "Preview the change first"),
        ({"reason": ""}, "This field is required"),
        ({"step": "2", "instruction": "again"}, "has run or holds a recorded call"),
        ({"op": "remove", "step": "3"}, "only a step that has not started"),
        ({"op": "insert", "step": "4", "title": "X", "depends_on": "1, two"}, "Step numbers"),
        ({"op": "strategy", "step": "", "strategy": "by_train"}, "is not one agent trip declares"),
    ],
)
def test_a_refused_change_says_why_and_writes_nothing(
    sim, redis_clean, operator, starter, fields, message
):
    task = sold_out_trip(created_by=starter)
    seq = task.last_seq

    response = repair(client_for(operator), task.pk, **fields)

    assert response.status_code == 400
    assert escape(message) in response.content.decode()
    assert Task.objects.get(pk=task.pk).last_seq == seq
    assert not Decision.objects.exists()


@pytest.mark.parametrize("role", ["auditor", "task_starter", "policy_admin"])
def test_only_operators_repair_a_plan(sim, redis_clean, request, operator, role):
    task = sold_out_trip()
    user = request.getfixturevalue(role)

    response = repair(client_for(user), task.pk, instruction="x", intent="preview")
    page = client_for(user).get(reverse("reviews:recover", args=[task.pk]))

    assert response.status_code == 403
    assert 'id="plan-repair-form"' not in page.content.decode()
    assert not Decision.objects.exists()


def test_the_repair_post_needs_the_csrf_token(sim, redis_clean, operator):
    task = sold_out_trip()

    response = repair(client_for(operator, enforce_csrf_checks=True), task.pk, instruction="x")

    assert response.status_code == 403


def test_someone_elses_task_is_repaired_only_when_taken_over(sim, redis_clean, operator, operator2):
    from reviews.services import claim_take

    task = sold_out_trip()
    claim_take(task_id=task.pk, actor=operator2)
    client = client_for(operator)
    digest = seen_digest(repair(client, task.pk, step="4", instruction="Hi.").content.decode())
    fields = {"step": "4", "instruction": "Hi.", "intent": "apply", "seen_digest": digest}

    held = repair(client, task.pk, **fields)
    taken = repair(client, task.pk, take_over="on", **fields)

    assert held.status_code == 409 and taken.status_code == 302
    assert list(Decision.objects.order_by("id").values_list("action", flat=True)) == [
        "reviews.claim.taken_over",
        "reviews.plan.repaired",
    ]


def test_the_api_previews_and_applies_a_repair(sim, redis_clean, operator, auditor):
    from django.test import Client

    task = sold_out_trip()
    token = api_token_create(user=operator, name="t")[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    url = f"/api/v1/tasks/{task.pk}/plan-repair"
    body = {"op": "strategy", "strategy": "flight_only", "reason": "Ada books the hotel"}

    preview = api.post(url, {**body, "preview": True}, content_type="application/json")
    assert preview.status_code == 200, preview.content
    assert preview.json()["applied"] is False
    assert [r["title"] for r in preview.json()["runs"]] == ["Send the itinerary"]
    assert not Decision.objects.exists()

    seen = preview.json()["before_digest"]
    applied = api.post(
        url, {**body, "seen_digest": seen, "then_retry": True}, content_type="application/json"
    )
    again = api.post(url, {**body, "seen_digest": seen}, content_type="application/json")

    assert applied.status_code == 200 and applied.json()["applied"] is True
    assert again.status_code == 409
    decision = Decision.objects.get()
    assert decision.channel == "api" and decision.detail["op"] == "strategy"
    assert Step.objects.get(task=task, ordinal=2).status == StepStatus.SKIPPED
    auditor_api = Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=auditor, name='a')[1]}")
    refused = auditor_api.post(url, {**body, "preview": True}, content_type="application/json")
    assert refused.status_code == 403


@pytest.fixture
def operator_client(operator):
    """The operator signed in once for all of a property test's examples (a preview writes
    nothing, so the examples share the session)."""
    return client_for(operator)


typed = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=80)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(instruction=typed, title=typed)
@example(instruction='<script>alert("x")</script>', title='<b hx-get="/evil">bold</b>')
@example(instruction="{{ 7|add:1 }} {% now 'Y' %}", title="\u202e\u0645\u0631\u062d\u0628\u0627")
def test_what_people_type_is_rendered_escaped_in_the_preview(
    sim, redis_clean, operator_client, instruction, title
):
    task = Task.objects.filter(goal="Trip to Rome").first() or sold_out_trip()

    response = repair(
        operator_client, task.pk, op="insert", step="4", title=title, instruction=instruction
    )

    page = response.content.decode()
    if not title.strip():
        assert response.status_code == 400
        return
    assert response.status_code == 200
    # What was typed appears only escaped; no markup of it reaches the page.
    assert "<script>alert" not in page and 'hx-get="/evil"' not in page
    if instruction.strip():
        assert escape(instruction.strip()) in page
    assert escape(title.strip()) in page
    assert not Decision.objects.exists()
