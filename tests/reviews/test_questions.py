"""An agent's question to a person: the service (who may answer, the answer as the tool's result
and one decision), the inbox lane and the question panel (roles, CSRF, a double-submitted
answer), the API, the gate timeout rules, and any text rendered escaped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentops.engine import task_create
from agentops.engine.decisions import gates_expire_overdue
from agentops.models import Gate, Step, Task, ToolCall
from agentops.states import GateStatus, LedgerStatus, TaskStatus
from agentops.tokens import api_token_create
from reviews.models import Decision
from reviews.services import (
    GateAlreadyDecided,
    NotAllowed,
    ReviewError,
    gate_answer,
    gate_approve,
)
from tests.builders import run_until_parked_or_done
from tests.markup import markup, plain
from tests.reviews.builders import client_for

pytestmark = pytest.mark.django_db


def asking(*, created_by: Any = None, note: str = "the lid is cracked") -> tuple[Task, Gate]:
    task = task_create(
        agent="refund_ask",
        goal="Refund the damaged item of A1001",
        input={"order_id": "A1001", "note": note},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.AWAITING_APPROVAL
    return task, Gate.objects.get(task=task, status=GateStatus.OPEN)


def answer(client: Any, gate: Gate, **fields: str) -> Any:
    return client.post(
        reverse("reviews:question_answer", args=[gate.pk]),
        {"seen_digest": gate.args_digest, **fields},
    )


# -- the service ---------------------------------------------------------------------------------


def test_a_chosen_option_is_the_tool_result_and_one_decision(sim, redis_clean, operator):
    task, gate = asking()

    gate_answer(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest, choice="half")
    task = run_until_parked_or_done(Task.objects.get(pk=task.pk))

    assert task.status == TaskStatus.SUCCEEDED
    asked = ToolCall.objects.get(task=task, tool="ask_human")
    assert asked.status == LedgerStatus.SUCCEEDED
    assert asked.result == {"answer": "half", "chosen": True, "answered_by": "olga"}
    assert ToolCall.objects.get(task=task, tool="issue_refund").args["amount"] == 28.0
    (decision,) = Decision.objects.all()
    assert decision.action == "reviews.question.answered" and decision.reason == "half"
    assert decision.detail["options"] == ["the full amount", "half", "nothing"]
    assert decision.detail["chosen"] is True and decision.detail["step"] == 1
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.APPROVED


def test_answers_that_do_not_fit_and_people_who_may_not_answer_are_refused(
    sim, redis_clean, operator, auditor, starter
):
    task, gate = asking(created_by=starter)

    for fields, refusal in [
        ({"choice": "a third", "text": ""}, "one of the options"),
        ({"choice": "half", "text": "half"}, "not both"),
        ({"choice": "", "text": "  "}, "not both"),
        ({"choice": "", "text": "x" * 4001}, "at most 4000"),
    ]:
        with pytest.raises(ReviewError, match=refusal):
            gate_answer(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest, **fields)
    for person, refusal in [(starter, "you started this task"), (auditor, "only members")]:
        with pytest.raises(NotAllowed, match=refusal):
            gate_answer(gate_id=gate.pk, actor=person, seen_digest=gate.args_digest, text="20")
    with pytest.raises(ReviewError, match="answer it"):
        gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    with pytest.raises(GateAlreadyDecided, match="changed since you opened it"):
        gate_answer(gate_id=gate.pk, actor=operator, seen_digest="0" * 64, text="20")

    assert Decision.objects.count() == 0
    assert Task.objects.get(pk=task.pk).status == TaskStatus.AWAITING_APPROVAL


def test_an_unanswered_question_expires_by_the_gate_timeout_rules(sim, redis_clean, operator):
    task, gate = asking()
    Gate.objects.filter(pk=gate.pk).update(due_at=timezone.now() - timedelta(seconds=1))

    assert gates_expire_overdue() == 1

    gate.refresh_from_db()
    assert gate.status == GateStatus.EXPIRED
    assert gate.feedback.startswith("Nobody answered your question within")
    step = Step.objects.get(task=task, ordinal=1)
    assert step.spec["notes"][-1].startswith("A reviewer rejected ask_human: Nobody answered")
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED
    assert Decision.objects.get().action == "reviews.gate.expired"


def test_an_escalated_question_goes_to_the_escalation_group(sim, redis_clean, operator):
    _task, gate = asking()
    Gate.objects.filter(pk=gate.pk).update(
        due_at=timezone.now() - timedelta(seconds=1),
        timeout_action="escalate",
        escalate_to="auditors",
    )

    gates_expire_overdue()

    gate.refresh_from_db()
    assert gate.status == GateStatus.OPEN and gate.approver_group == "auditors"
    with pytest.raises(NotAllowed, match="only members of 'auditors'"):
        gate_answer(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest, text="20")


# -- the pages -----------------------------------------------------------------------------------


def test_the_inbox_shows_the_question_in_its_own_lane(sim, redis_clean, operator):
    _task, gate = asking()
    client = client_for(operator)

    page = client.get(reverse("reviews:inbox")).content.decode()
    lane = client.get(reverse("reviews:inbox") + "?kind=question").content.decode()
    gates = client.get(reverse("reviews:inbox") + "?kind=gate").content.decode()

    question_url = reverse("reviews:question", args=[gate.pk])
    assert f'<a href="{question_url}">Question #{gate.pk}</a>' in page
    assert (
        "How much should we refund?" in page
        and 'options: <span translate="no">the full amount · half' in page
    )
    assert f'value="{gate.pk}:' not in page  # never in a bulk approval
    assert f"Question #{gate.pk}" in lane and f"Question #{gate.pk}" not in gates
    redirected = client.get(reverse("reviews:gate", args=[gate.pk]))
    assert redirected.status_code == 302 and redirected["Location"] == question_url


def test_the_panel_shows_the_question_with_its_context_and_the_answer_form(
    sim, redis_clean, operator, auditor
):
    _task, gate = asking()

    page = client_for(operator).get(reverse("reviews:question", args=[gate.pk])).content.decode()
    read_only = client_for(auditor).get(reverse("reviews:question", args=[gate.pk]))

    assert "Order A1001 (56.0 EUR) arrived damaged: the lid is cracked." in page
    assert "Order A1001, paid 56.0 EUR, status delivered." in page
    assert "Step 2 of 4" in page and "Refund the damaged item of A1001" in page
    assert page.count('type="radio" name="choice"') == 3 and 'name="csrfmiddlewaretoken"' in page
    assert read_only.status_code == 200 and 'id="answer-form"' not in read_only.content.decode()


def test_answering_from_the_panel_redirects_and_a_second_submission_gets_409(
    sim, redis_clean, operator
):
    _task, gate = asking()
    client = client_for(operator)

    first = answer(client, gate, choice="the full amount")
    message = client.get(first["Location"]).content.decode()
    second = answer(client, gate, choice="half")

    assert first.status_code == 302
    assert "your answer goes to the agent" in message
    assert second.status_code == 409
    assert 'Answered by <span translate="no">olga</span>' in second.content.decode()
    assert Decision.objects.count() == 1
    assert Step.objects.get(pk=gate.step_id).approval["answer"]["answer"] == "the full amount"


def test_the_answer_post_checks_role_csrf_and_the_form(sim, redis_clean, operator, auditor):
    _task, gate = asking()
    url = reverse("reviews:question_answer", args=[gate.pk])

    assert answer(client_for(auditor), gate, choice="half").status_code == 403
    assert (
        answer(client_for(operator, enforce_csrf_checks=True), gate, choice="half").status_code
        == 403
    )
    assert client_for(operator).get(url).status_code == 405
    both = answer(client_for(operator), gate, choice="half", answer="twenty")
    neither = answer(client_for(operator), gate)
    unknown = answer(client_for(operator), gate, choice="all of it")
    assert both.status_code == neither.status_code == unknown.status_code == 400
    assert "one of the two" in both.content.decode()
    assert Decision.objects.count() == 0
    assert answer(client_for(operator), gate, answer="20 EUR").status_code == 302


# -- the API -------------------------------------------------------------------------------------


def api(user: Any) -> Client:
    _, token = api_token_create(user=user, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_api_lists_and_answers_questions_with_the_same_checks(
    sim, redis_clean, operator, auditor
):
    _task, gate = asking()
    path = f"/api/v1/questions/{gate.pk}/answer"
    body = {"seen_digest": gate.args_digest, "choice": "half"}

    listed = api(auditor).get("/api/v1/questions").json()
    refused = api(auditor).post(path, body, content_type="application/json")
    wrong = api(operator).post(path, {**body, "choice": "most"}, content_type="application/json")
    done = api(operator).post(path, body, content_type="application/json")
    again = api(operator).post(path, body, content_type="application/json")

    assert [q["id"] for q in listed] == [gate.pk]
    assert listed[0]["options"] == ["the full amount", "half", "nothing"]
    assert listed[0]["question"].startswith("Order A1001")
    assert refused.status_code == 403 and wrong.status_code == 400
    assert done.status_code == 200, done.content
    assert done.json()["answer"] == "half" and done.json()["answered_by"] == "olga"
    assert again.status_code == 409
    (decision,) = Decision.objects.all()
    assert decision.channel == "api"
    other = api(operator).post(
        "/api/v1/questions/999999/answer", body, content_type="application/json"
    )
    assert other.status_code == 404


# -- any text an agent or a person gives ---------------------------------------------------------


@pytest.fixture
def operator_client(operator):
    """The operator signed in once for all of a property test's examples (its pages are reads)."""
    return client_for(operator)


texts = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=200,
).filter(lambda t: t.strip())


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(question=texts, options=st.lists(texts, max_size=4, unique=True), context=texts, said=texts)
def test_a_question_its_options_and_the_answer_render_escaped(
    operator_client, question, options, context, said
):
    task = task_create(agent="refund_ask", goal="Refund", input={"order_id": "A1001"})
    step = Step.objects.get(task=task, ordinal=1)
    arguments = {"question": question, "options": options, "context": context}
    now = timezone.now()
    open_gate = Gate.objects.create(
        task=task,
        step=step,
        tool="ask_human",
        arguments=arguments,
        args_digest="d" * 64,
        rule="read",
        approval_kind="question",
        due_at=now + timedelta(hours=1),
    )

    def answered_gate(arguments: dict[str, Any], answer: str, digest: str) -> Gate:
        return Gate.objects.create(
            task=task,
            step=step,
            tool="ask_human",
            arguments=arguments,
            args_digest=digest * 64,
            rule="read",
            approval_kind="question",
            status=GateStatus.APPROVED,
            feedback=answer,
            decided_at=now,
            due_at=now + timedelta(hours=1),
        )

    closed = answered_gate(arguments, said, "e")
    urls = (
        reverse("reviews:question", args=[open_gate.pk]),
        reverse("reviews:question", args=[closed.pk]),
        reverse("reviews:inbox") + "?kind=question",
    )
    panel, answered, inbox = (operator_client.get(url).content.decode() for url in urls)

    for text in (question, context, *options):
        assert escape(text) in panel
    assert escape(said) in answered
    # No markup of theirs reaches a page: each is the page plain texts of the same shape give.
    plain_arguments = {
        "question": plain(question),
        "options": [plain(option) for option in options],
        "context": plain(context),
    }
    Gate.objects.filter(pk=open_gate.pk).update(arguments=plain_arguments)
    # A decided gate is final (its arguments and answer are the record's): a plain twin instead.
    twin = answered_gate(plain_arguments, plain(said), "f")
    plain_urls = (urls[0], reverse("reviews:question", args=[twin.pk]), urls[2])
    for page, url in zip((panel, answered, inbox), plain_urls, strict=True):
        assert markup(page) == markup(operator_client.get(url).content.decode()), url
