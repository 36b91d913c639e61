"""The model reads values, never storage pointers: a result within the budget is given whole
however it is stored, a longer one as an excerpt with how to read more, and reading more works
(the engine answers `read_result` inside the step); the record says which."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st

from agentops.dev.sim.models import Effect
from agentops.dev.sim.world import order
from agentops.engine import task_create
from agentops.engine.excerpts import MAX_READS, READ_TOOL, read_answer, result_given, result_json
from agentops.engine.jsonvalues import canonical_json, is_pointer
from agentops.engine.model import ModelRequest, loaded_response
from agentops.engine.registry import Agent, PlanStep, register_agent, tool, tools
from agentops.models import Event, Step, Task
from agentops.states import StepStatus, TaskStatus
from tests.agentops.test_jsonvalues import json_values
from tests.builders import run_until_parked_or_done
from tests.strict_openai import StrictServer, refund_brain, serve, tool_call

pytestmark = pytest.mark.django_db

ORDER = order("A1001")
# The lookup's result as an artifact stores it (sorted keys, compact): what excerpts count.
ORDER_JSON = json.dumps(ORDER, sort_keys=True, separators=(",", ":")).encode()
# Where a tool message says which bytes of which step's result it shows.
SHOWN = re.compile(r"^(?:Excerpt|Read): bytes (\d+)-(\d+) of the (\d+) bytes of step (\d+)'s")
MORE = re.compile(rf"call {READ_TOOL} with (\{{.*\}})\.$")

# What the scripted model was asked, per call (the tests read the tools it was offered).
ASKED: list[ModelRequest] = []


def _tool_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool" and isinstance(m["content"], str)]


def _reader(request: ModelRequest) -> dict[str, Any]:
    """A model that looks up the order, then reports its amount, reading the lookup's result
    on to its end when the prompt gives only an excerpt of it."""
    ASKED.append(request)
    if request.step == 0:
        return {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A1001"}}]}
    latest = next(m for m in reversed(request.messages) if m["role"] == "tool")["content"]
    if isinstance(latest, dict):  # given whole
        found = latest
    else:
        more = MORE.search(latest.partition("\n")[0])
        if more is not None:
            return {"tool_calls": [{"name": READ_TOOL, "arguments": json.loads(more.group(1))}]}
        found = json.loads("".join(t.partition("\n")[2] for t in _tool_texts(request.messages)))
    return {"text": f"Order {found['order_id']} was {found['amount']} {found['currency']}."}


def _endless_reader(request: ModelRequest) -> dict[str, Any]:
    if request.step == 0:
        return _reader(request)
    ASKED.append(request)
    return {"tool_calls": [{"name": READ_TOOL, "arguments": {"step": 1, "offset": 0}}]}


for _name, _script in (("test_reader", _reader), ("test_endless_reader", _endless_reader)):
    register_agent(
        Agent(
            name=_name,
            system_prompt="Look up the order, then say what it cost.",
            tools=["lookup_order"],
            plan=[PlanStep("Look up the order", "lookup_order"), PlanStep("Report the amount")],
            script=_script,
            hidden=True,
        )
    )


@pytest.fixture
def budget_64(settings: Any, tmp_path: Any) -> Iterator[None]:
    settings.MEDIA_ROOT = tmp_path
    settings.AGENTOPS = {**settings.AGENTOPS, "CONTEXT_VALUE_BYTES": 64}
    ASKED.clear()
    yield
    ASKED.clear()


def _payload(task: Task, action: str, ordinal: int) -> dict[str, Any]:
    return Event.objects.get(task=task, action=action, step_ordinal=ordinal).payload


@pytest.mark.parametrize("threshold", [256 * 1024, 64], ids=["in its row", "an artifact"])
def test_a_result_above_the_budget_is_an_excerpt_the_model_reads_to_its_end(
    sim: str, redis_clean: None, budget_64: None, settings: Any, threshold: int
) -> None:
    settings.AGENTOPS = {**settings.AGENTOPS, "ARTIFACT_THRESHOLD_BYTES": threshold}
    size = len(ORDER_JSON)
    assert size > 2 * 64  # the lookup's result needs two reads after its excerpt

    task = run_until_parked_or_done(task_create(agent="test_reader", goal="What did A1001 cost?"))

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    lookup, report = Step.objects.filter(task=task).order_by("ordinal")
    assert is_pointer(lookup.output) == (threshold == 64)
    assert report.output == {"text": f"Order A1001 was {ORDER['amount']} EUR."}
    # The prompt gave 64 of the result's bytes, and offered the tool to read on.
    first = ASKED[1]
    excerpt = _tool_texts(first.messages)
    assert len(excerpt) == 1
    assert excerpt[0] == (
        f"Excerpt: bytes 0-64 of the {size} bytes of step 1's result (JSON). To read more, "
        f'call {READ_TOOL} with {{"offset":64,"step":1}}.\n' + ORDER_JSON[:64].decode()
    )
    assert [t["name"] for t in ASKED[0].tools] == ["lookup_order"]
    assert [t["name"] for t in first.tools] == ["lookup_order", READ_TOOL]
    # Three model calls for the report: two reads, then the answer.
    assert [r.step for r in ASKED] == [0, 1, 1, 1]
    # The record says which: an excerpt of 64 of `size` bytes, then the two reads.
    artifact = {"artifact": lookup.output["$artifact"]} if threshold == 64 else {}
    started = _payload(task, "agentops.step.started", 1)["context"]
    assert started["results"] == [
        {"step": 1, "given": "excerpt", "bytes": 64, "of": size, **artifact}
    ]
    result = _payload(task, "agentops.step.model_result", 1)
    assert result["reads"] == [
        {"step": 1, "offset": 64, "bytes": 64, "of": size},
        {"step": 1, "offset": 128, "bytes": size - 128, "of": size},
    ]
    # The usage is the three calls', each prompt estimated.
    assert result["usage"]["prompt_tokens"] == result["usage"]["prompt_estimate"]
    assert result["usage"]["prompt_estimate"] == sum(r.prompt_estimate or 0 for r in ASKED[1:])


# The report's prompt is built in the commit that stores the lookup (its artifact taken from
# memory), or, when the slice ends after the lookup, by the next claim from the stored rows.
@pytest.mark.parametrize("slice_seconds", [5.0, 0.0], ids=["same commit", "next slice"])
def test_a_result_within_the_budget_is_given_whole_and_recorded_so_when_it_is_an_artifact(
    sim: str, redis_clean: None, settings: Any, tmp_path: Any, slice_seconds: float
) -> None:
    settings.MEDIA_ROOT = tmp_path
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "ARTIFACT_THRESHOLD_BYTES": 64,
        "SLICE_SECONDS": slice_seconds,
    }
    ASKED.clear()

    task = run_until_parked_or_done(task_create(agent="test_reader", goal="What did A1001 cost?"))

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    lookup = Step.objects.get(task=task, ordinal=0)
    assert is_pointer(lookup.output)
    tool_messages = [m for m in ASKED[1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [ORDER]
    assert [t["name"] for t in ASKED[1].tools] == ["lookup_order"]
    assert _payload(task, "agentops.step.started", 1)["context"]["results"] == [
        {
            "step": 1,
            "given": "full",
            "bytes": len(ORDER_JSON),
            "artifact": lookup.output["$artifact"],
        }
    ]
    assert "reads" not in _payload(task, "agentops.step.model_result", 1)
    claims = Event.objects.filter(task=task, action="agentops.task.claimed").count()
    assert claims == (1 if slice_seconds else 2)


def test_a_model_that_reads_on_past_the_cap_fails_its_step_as_invalid_output(
    sim: str, redis_clean: None, budget_64: None
) -> None:
    task = run_until_parked_or_done(task_create(agent="test_endless_reader", goal="Read forever"))

    assert task.status == TaskStatus.NEEDS_ATTENTION
    report = Step.objects.get(task=task, ordinal=1)
    assert report.status == StepStatus.FAILED
    assert report.error["kind"] == "output_invalid"
    assert report.error["message"] == (
        f"the model asked to read more than {MAX_READS} times in one step"
    )
    # Each try asked once, then once per read; the last read was refused, not answered.
    per_try = MAX_READS + 1
    assert [r.step for r in ASKED].count(1) == per_try * report.attempts


def test_no_agent_tool_may_take_the_engines_read_tool_name() -> None:
    def read_result(call: Any, *, step: int) -> dict[str, Any]:
        return {}

    with pytest.raises(ValueError, match=f"'{READ_TOOL}' is the engine's own tool"):
        tool(side_effect="read")(read_result)
    with pytest.raises(ValueError, match=f"'{READ_TOOL}' is the engine's own tool"):
        tool(side_effect="read", name=READ_TOOL)(_reader)
    assert READ_TOOL not in {t.name for t in tools()}


def _step(ordinal: int, output: Any, status: str = StepStatus.SUCCEEDED) -> Step:
    return Step(ordinal=ordinal, status=status, output=output, title=f"step {ordinal + 1}")


@pytest.mark.parametrize(
    ("arguments", "reason", "recorded_step"),
    [
        ({"step": 3, "offset": 0}, "step 3 has no recorded result", 3),
        ({"step": 2, "offset": 0}, "step 2 has no recorded result", 2),
        (
            {"step": 1, "offset": 10_000},
            f"offset 10000 is past the result's end ({len(ORDER_JSON)} bytes)",
            1,
        ),
        ({"step": 0, "offset": 0}, "`step` must be a step's number (1 or more)", None),
        ({"step": 1, "offset": -1}, "`offset` must be a byte offset (0 or more)", None),
        (
            {"step": 1, "offset": 0, "length": 0},
            "`length` must be a number of bytes (1 or more)",
            None,
        ),
        ({"step": True, "offset": 0}, "`step` must be a step's number (1 or more)", None),
        ({"step": "x" * 1000, "offset": 0}, "`step` must be a step's number (1 or more)", None),
        ("step 1", "`step` must be a step's number (1 or more)", None),
    ],
)
def test_a_read_the_engine_cannot_answer_is_answered_with_why(
    arguments: Any, reason: str, recorded_step: int | None
) -> None:
    steps = [_step(0, ORDER), _step(1, None, StepStatus.RUNNING)]

    text, entry = read_answer(steps, arguments)

    assert text == f"{READ_TOOL} refused: {reason}"
    # The record keeps the reason and the step's number, nothing else the model wrote.
    assert entry == {"step": recorded_step, "refused": reason}


@hypothesis.settings(
    deadline=None,
    max_examples=150,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
@hypothesis.given(
    value=json_values.filter(lambda v: v is not None),
    budget=st.integers(min_value=1, max_value=80),
    short=st.integers(min_value=1, max_value=80),
)
def test_an_excerpt_and_the_reads_it_points_to_give_back_the_exact_json(
    value: Any, budget: int, short: int, settings: Any
) -> None:
    settings.AGENTOPS = {**settings.AGENTOPS, "CONTEXT_VALUE_BYTES": budget}
    data = result_json(value)
    text = data.decode()
    given = result_given(value, data, number=1, limit=budget, excerpt=short, artifact=None)
    if len(data) <= budget:
        full = {"step": 1, "given": "full", "bytes": len(data)}
        assert (given.content, given.text, given.entry) == (value, canonical_json(value), full)
        return
    steps = [_step(0, value)]
    parts: list[str] = []
    message, reads = given.content, 0
    while True:
        head, _, part = message.partition("\n")
        shown = SHOWN.match(head)
        assert shown is not None, head
        start, end, size = (int(shown.group(i)) for i in (1, 2, 3))
        assert part.encode() == data[start:end] and size == len(data)
        # At most the bytes asked for, unless one character is wider.
        assert end - start <= (short if not parts else budget) or len(part) == 1
        parts.append(part)
        more = MORE.search(head)
        if more is None:
            assert head.endswith("this is its end.") and end == size
            break
        message, entry = read_answer(steps, json.loads(more.group(1)))
        reads += 1
        assert entry == {"step": 1, "offset": end, "bytes": entry["bytes"], "of": size}
    assert "".join(parts) == text
    assert given.entry == {
        "step": 1,
        "given": "excerpt",
        "bytes": len(parts[0].encode()),
        "of": len(data),
    }
    assert reads <= len(data)


# -- a real model's conversation: the official SDK against the strict server ---------------------


def reading_brain(body: dict[str, Any]) -> dict[str, Any]:
    """A competent model for the refund agent that reads every result the conversation cuts
    short to its end before it acts (then acts as `refund_brain` on the whole results)."""
    messages = body["messages"]
    parts: dict[int, dict[int, str]] = {}
    sizes: dict[int, int] = {}
    for message in messages:
        if message["role"] != "tool":
            continue
        head, _, part = message["content"].partition("\n")
        shown = SHOWN.match(head)
        if shown:
            start, _, size, step = (int(shown.group(i)) for i in (1, 2, 3, 4))
            parts.setdefault(step, {})[start] = part
            sizes[step] = size
    for step, pieces in sorted(parts.items()):
        reached = max(start + len(piece.encode()) for start, piece in pieces.items())
        if reached < sizes[step]:
            return tool_call(READ_TOOL, {"step": step, "offset": reached})
    whole = {s: "".join(p for _, p in sorted(pieces.items())) for s, pieces in parts.items()}
    rewritten: list[dict[str, Any]] = []
    for message in messages:
        shown = SHOWN.match(message["content"] or "") if message["role"] == "tool" else None
        if shown and message["content"].startswith("Read:"):
            continue
        if shown:
            message = {**message, "content": whole[int(shown.group(4))]}
        rewritten.append(message)
    return refund_brain({**body, "messages": rewritten})


def test_a_real_models_conversation_reads_a_cut_result_through_the_sdk(
    sim: str, redis_clean: None, settings: Any, tmp_path: Any
) -> None:
    state = StrictServer(brain=reading_brain)
    httpd, url = serve(state)
    settings.MEDIA_ROOT = tmp_path
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "MODEL_ADAPTER": "openai",
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "test-key",
        "CONTEXT_VALUE_BYTES": 100,
        "ARTIFACT_THRESHOLD_BYTES": 64,
    }
    try:
        task = run_until_parked_or_done(
            task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
        )
    finally:
        httpd.shutdown()

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert state.refused == []
    refund = Step.objects.get(task=task, ordinal=3)
    assert loaded_response(refund.model_response)["tool_calls"][0]["name"] == "issue_refund"
    refunded = Event.objects.get(task=task, action="agentops.step.model_result", step_ordinal=3)
    # The lookup (153 bytes) was cut to 100 and read on: the refund is the order's amount.
    assert refunded.payload["reads"][0] == {
        "step": 1,
        "offset": 100,
        "bytes": len(ORDER_JSON) - 100,
        "of": len(ORDER_JSON),
    }
    refunds = Effect.objects.filter(service="payments", operation="refund")
    assert [e.request["amount"] for e in refunds] == [ORDER["amount"]]
    offered = [[t["function"]["name"] for t in body.get("tools", [])] for body in state.received]
    assert READ_TOOL in offered[-1]
    # Each prompt's estimate is calibrated by the provider's count for the step before it, read
    # from that step's response (an artifact at this threshold), as for a response in its row.
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    scales = []
    for step in steps[1:]:
        usage = loaded_response(steps[step.ordinal - 1].model_response)["usage"]
        scale = round(min(max(usage["prompt_tokens"] / usage["prompt_estimate"], 0.25), 4.0), 3)
        started = Event.objects.get(
            task=task, action="agentops.step.started", step_ordinal=step.ordinal
        )
        assert started.payload["context"]["scale"] == scale
        scales.append(scale)
    assert all(is_pointer(step.model_response) for step in steps)
    assert set(scales) != {1.0}
