"""Typed tool contracts (pydantic), and tool results that cannot be used.

A tool whose result is not JSON, too large, or breaks its declared result schema ends its step with
a recorded reason, its ledger row resolved (never left pending), and the job does not crash.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from django.urls import reverse
from pydantic import BaseModel, Field

from agentops.engine import task_create, task_retry
from agentops.engine.errors import ModelFailure
from agentops.engine.model import ModelRequest
from agentops.engine.registry import Agent, PlanStep, ToolContext, register_agent, tool
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.builders import run_until_parked_or_done
from tests.library_words import pydantic_says

CALLS: dict[str, int] = {}


class Address(BaseModel):
    city: str
    postcode: Annotated[str, Field(pattern=r"^\d{5}$")]


class Receipt(BaseModel):
    receipt_id: str
    amount: float


@tool(side_effect="write", systems=("crm",))
def ship_to(
    call: ToolContext,
    *,
    order_id: Annotated[str, Field(min_length=2)],
    amount: Annotated[float, Field(gt=0, le=1000)],
    address: Address,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """Ship an order to an address."""
    return {"ok": True}


@tool(side_effect="read", systems=("crm",))
def read_set(call: ToolContext, *, order_id: str) -> dict[str, Any]:
    """A read tool with a bug: a set in its result."""
    CALLS["read_set"] = CALLS.get("read_set", 0) + 1
    return {"ids": {1, 2, 3}}


@tool(side_effect="notify", systems=("crm",))
def write_set(call: ToolContext, *, order_id: str) -> Any:
    """A notification (no probe, no key support) that returns a set itself."""
    CALLS["write_set"] = CALLS.get("write_set", 0) + 1
    return {1, 2}


@tool(side_effect="read", systems=("crm",), result=Receipt)
def bad_receipt(call: ToolContext, *, order_id: str) -> dict[str, Any]:
    """Returns a receipt in the wrong shape."""
    return {"receipt_id": 7}


@tool(side_effect="read", systems=("crm",))
def huge(call: ToolContext, *, order_id: str) -> dict[str, Any]:
    """Returns more than the result size limit."""
    return {"blob": "x" * 5000}


@tool(side_effect="read", systems=("crm",))
def crashes(call: ToolContext, *, order_id: str) -> dict[str, Any]:
    """Raises an unexpected exception."""
    raise KeyError("oops")


def _script(request: ModelRequest) -> dict[str, Any]:
    name = request.task_input["tool"]
    return {"tool_calls": [{"name": name, "arguments": {"order_id": "A1"}}], "confidence": 0.9}


register_agent(
    Agent(
        name="outputs-bot",
        system_prompt="test",
        tools=["read_set", "write_set", "bad_receipt", "huge", "crashes", "ship_to"],
        plan=lambda data: [PlanStep("Call the tool", data["tool"])],
        script=_script,
        hidden=True,
    )
)


def test_the_schema_comes_from_type_hints_with_required_constraints_and_nested_models():
    parameters = ship_to.schema()["parameters"]

    assert parameters["type"] == "object"
    assert parameters["required"] == ["order_id", "amount", "address"]
    assert parameters["additionalProperties"] is False
    assert parameters["properties"]["amount"]["exclusiveMinimum"] == 0
    assert parameters["properties"]["amount"]["maximum"] == 1000
    assert parameters["properties"]["order_id"]["minLength"] == 2
    assert parameters["$defs"]["Address"]["required"] == ["city", "postcode"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"order_id": "A1", "amount": 5}, "missing ['address']"),
        (
            {"order_id": "A1", "amount": 5, "address": {"city": "x", "postcode": "1"}, "x": 1},
            "unexpected arguments ['x']",
        ),
        (
            {"order_id": "A1", "amount": 5, "address": {"city": 3, "postcode": "12345"}},
            "arguments.address.city: Input should be a valid string",
        ),
        (
            {"order_id": "A1", "amount": 5, "address": {"city": "x", "postcode": "1"}},
            "arguments.address.postcode: String should match pattern",
        ),
        (
            {"order_id": "A1", "amount": 0, "address": {"city": "x", "postcode": "12345"}},
            "arguments.amount: Input should be greater than 0",
        ),
        (
            {"order_id": "A1", "amount": "5", "address": {"city": "x", "postcode": "12345"}},
            "arguments.amount: Input should be a valid number",
        ),
        (
            {
                "order_id": "A1",
                "amount": 5,
                "address": {"city": "x", "postcode": "12345"},
                "tags": ["a", 2],
            },
            "arguments.tags[1]: Input should be a valid string",
        ),
    ],
    ids=["missing", "unknown", "nested-type", "nested-pattern", "bound", "no-coercion", "list"],
)
def test_arguments_that_break_the_contract_are_output_invalid_with_their_path(arguments, message):
    with pytest.raises(ModelFailure) as failure:
        ship_to.check_arguments(arguments)

    assert failure.value.kind == "output_invalid"
    assert message in str(failure.value)


def test_arguments_that_fit_pass_and_an_int_is_a_number():
    ship_to.check_arguments(
        {"order_id": "A1", "amount": 5, "address": {"city": "Lyon", "postcode": "69001"}}
    )


def run(tool_name: str) -> tuple[Task, Step, ToolCall]:
    task = run_until_parked_or_done(
        task_create(agent="outputs-bot", goal="test", input={"tool": tool_name})
    )
    step = Step.objects.get(task=task)
    calls = list(ToolCall.objects.filter(task=task))
    assert len(calls) == 1
    return task, step, calls[0]


@pytest.mark.django_db
def test_a_read_tool_returning_a_set_fails_its_step_with_output_invalid_and_a_resolved_row():
    CALLS.clear()

    task, step, call = run("read_set")

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert step.status == StepStatus.FAILED
    assert step.error["kind"] == "output_invalid" and step.error["layer"] == "tool"
    assert step.error["nature"] == "logic"
    assert "read_set.result.ids: set is not JSON-serializable" in step.error["message"]
    assert task.failure["kind"] == "output_invalid"
    assert call.status == LedgerStatus.FAILED  # a read: asking again is safe, once a person says
    assert CALLS["read_set"] == 1  # nothing retried blindly
    assert Event.objects.filter(task=task, action="agentops.ledger.failed").count() == 1


@pytest.mark.django_db
def test_a_write_tool_returning_a_set_is_recorded_as_run_and_a_retry_does_not_pass_it_on(
    django_user_model,
):
    CALLS.clear()

    task, step, call = run("write_set")

    assert step.error["kind"] == "output_invalid"
    assert call.status == LedgerStatus.SUCCEEDED  # it ran; nothing can tell it did not
    assert "$invalid_output" in call.result
    admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    from django.test import Client

    client = Client()
    client.force_login(admin)
    page = client.get(reverse("reviews:recover", args=[task.pk])).content.decode()
    assert "output_invalid" in page and "tool-output-invalid" in page
    assert "The tool ran but returned output that cannot be stored" in page

    task_retry(task_id=task.pk, actor=admin)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert Step.objects.get(task=task).error["kind"] == "output_invalid"
    assert CALLS["write_set"] == 1  # the effect is not repeated
    assert ToolCall.objects.filter(task=task).count() == 1


@pytest.mark.django_db
def test_a_result_that_breaks_the_declared_schema_is_schema_mismatch():
    _task, step, call = run("bad_receipt")

    assert step.error["kind"] == "schema_mismatch"
    assert f"result.receipt_id: {pydantic_says(str, 7)}" in step.error["message"]
    assert "result.amount" in step.error["message"]
    assert call.status == LedgerStatus.FAILED


@pytest.mark.django_db
def test_a_result_above_the_size_limit_is_output_invalid(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "TOOL_RESULT_MAX_BYTES": 1000}

    _task, step, call = run("huge")

    assert step.error["kind"] == "output_invalid"
    assert "(limit 1000)" in step.error["message"]
    assert call.status == LedgerStatus.FAILED


@pytest.mark.django_db
def test_a_tool_that_raises_ends_its_step_not_the_worker():
    task, step, call = run("crashes")

    assert task.status in (TaskStatus.NEEDS_ATTENTION, TaskStatus.RETRY_SCHEDULED)
    assert step.error["kind"] == "tool_error"
    assert "KeyError" in step.error["message"]
    assert call.status != LedgerStatus.PENDING
