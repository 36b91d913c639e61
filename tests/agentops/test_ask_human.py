"""An agent asks a person through the OpenAI adapter, with a real worker process: the official SDK
against the strict server, which validates every request with the SDK's own types. The question
parks the task with no worker holding it; the person's answer comes back to the model as the
ask_human tool message, answering the call by its recorded id, and the agent acts on it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Gate, Task, ToolCall
from agentops.states import GateStatus, LedgerStatus, TaskStatus
from reviews.models import Decision
from reviews.services import gate_answer
from reviews.states import VIA_BROWSER
from tests.agentops.test_openai_e2e import model_env
from tests.conftest import wait_for
from tests.strict_openai import StrictServer, _tool_results, serve, tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]


def refund_ask_brain(body: dict[str, Any]) -> dict[str, Any]:
    """What a competent model does for refund_ask: look up, ask with options, refund what the
    person said (read from the ask_human tool message), tell the customer."""
    messages = body["messages"]
    texts = [m["content"] for m in messages if m["role"] == "user"]
    step = int(re.search(r"Now do step (\d+) of", texts[-1]).group(1)) - 1
    results = _tool_results(messages)
    order = next((r for r in results if "customer_email" in r), {})
    answer = next((r for r in reversed(results) if "answered_by" in r), {})
    typed = re.search(r"\d+", str(answer.get("answer", "")))
    amount = float(typed.group(0)) if typed else order.get("amount", 0) / 2
    plan = [
        ("lookup_order", {"order_id": "A1001"}),
        (
            "ask_human",
            {
                "question": "The lid is cracked. How much should we refund?",
                "options": ["the full amount", "half"],
                "context": f"Paid {order.get('amount')} EUR.",
            },
        ),
        ("issue_refund", {"order_id": "A1001", "amount": amount, "currency": "EUR"}),
        (
            "email_customer",
            {
                "to": order.get("customer_email", "x@example.com"),
                "subject": "Refund",
                "body": f"We refunded {amount} EUR.",
            },
        ),
    ]
    name, arguments = plan[step]
    return tool_call(name, arguments)


@pytest.fixture
def strict() -> Iterator[StrictServer]:
    state = StrictServer(brain=refund_ask_brain)
    httpd, _ = serve(state)
    yield state
    httpd.shutdown()


def open_question(task: Task, worker: Any) -> Gate | None:
    """The task's open question; fails at once if the worker or the task ended without one (the
    wait's bound is only for a hang: a loaded machine may take a minute to start the worker)."""
    gate = Gate.objects.filter(task=task, status=GateStatus.OPEN).first()
    if gate is None:
        assert worker.poll() is None, f"the worker ended (exit {worker.returncode})"
        ended = Task.objects.get(pk=task.pk)
        assert not ended.is_terminal, f"the task ended {ended.status}: {ended.failure}"
    return gate


def test_a_question_parks_without_a_worker_and_the_answer_is_the_tool_result(
    processes, strict, django_user_model
):
    operator = django_user_model.objects.create_user("olga")
    operator.groups.add(Group.objects.get_or_create(name="operators")[0])
    task = task_create(agent="refund_ask", goal="Refund A1001", input={"order_id": "A1001"})
    worker = processes.worker(extra_env=model_env(strict))

    gate = wait_for(lambda: open_question(task, worker), timeout=300, message="the question")
    time.sleep(1)  # the worker has ended its job: nothing moves while the question waits
    parked = Task.objects.get(pk=task.pk)
    assert parked.status == TaskStatus.AWAITING_APPROVAL
    assert parked.lease_owner == "" and parked.lease_expires_at is None
    assert gate.approval_kind == "question" and len(strict.received) == 2
    offered = {t["function"]["name"]: t["function"] for t in strict.received[1]["tools"]}
    assert set(offered["ask_human"]["parameters"]["properties"]) == {
        "question",
        "options",
        "context",
    }
    assert ToolCall.objects.filter(task=task, tool="ask_human").count() == 0

    gate_answer(
        gate_id=gate.pk,
        actor=operator,
        seen_digest=gate.args_digest,
        text="Refund 20 EUR: the rest of the set is fine",
        via=VIA_BROWSER,
    )
    wait_for(lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=60, message="the task")

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert strict.refused == [] and len(strict.received) == 4
    asked = ToolCall.objects.get(task=task, tool="ask_human")
    assert asked.status == LedgerStatus.SUCCEEDED
    assert asked.result == {
        "answer": "Refund 20 EUR: the rest of the set is fine",
        "chosen": False,
        "answered_by": "olga",
    }
    # The model read the answer as the ask_human call's tool message, by the recorded call id.
    call_id = task.steps.get(ordinal=1).model_response["tool_calls"][0]["id"]
    third = strict.received[2]["messages"]
    answered = [m for m in third if m["role"] == "tool" and m["tool_call_id"] == call_id]
    assert json.loads(answered[0]["content"])["answer"].startswith("Refund 20 EUR")
    assert ToolCall.objects.get(task=task, tool="issue_refund").args["amount"] == 20
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    (decision,) = Decision.objects.all()
    assert decision.action == "reviews.question.answered" and decision.actor_label == "olga"
