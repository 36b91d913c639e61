"""`model check`: a short conversation that proves a model server works with this product.

It asks for a tool call, sends the result back, asks for a second one (so the tool history, with
its call ids, goes back to the server twice), then asks for a JSON object. It reports the server,
the model, latency and tokens, and whether tool calling, tool history and JSON output work; any
incompatibility is a problem with a sentence a user can act on.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from agentops.engine.errors import FailureKind, ModelFailure
from agentops.engine.jsonvalues import json_parsed
from agentops.engine.model import (
    OpenAICompatibleModel,
    ScriptedModel,
    assistant_message,
    get_model_adapter,
    tool_message,
)
from agentops.engine.registry import Agent

ADD_TOOL = {
    "name": "add",
    "description": "Add two integers and return their sum.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}
QUESTIONS = ((2, 3), (5, 7))


@dataclass
class Report:
    ok: bool = False
    adapter: str = ""
    server: str = ""
    model: str = ""
    calls: int = 0
    latency_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calling: bool = False
    tool_history: bool = False
    json_output: bool = False
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["latency_ms_total"] = round(sum(self.latency_ms), 1)
        return data


def model_check(agent: Agent | None = None) -> Report:
    """Hold the preflight conversation with the agent's model (or the default one)."""
    adapter = get_model_adapter(agent)
    report = Report(adapter=adapter.name, model=adapter.model)
    if isinstance(adapter, ScriptedModel):
        report.server = "scripted (offline)"
        report.ok = report.tool_calling = report.tool_history = report.json_output = True
        return report
    assert isinstance(adapter, OpenAICompatibleModel)
    report.server = adapter.base_url
    try:
        _converse(adapter, report)
    except ModelFailure as failure:
        report.problems.append(_explain(failure, report))
    report.ok = not report.problems
    return report


def _converse(adapter: OpenAICompatibleModel, report: Report) -> None:
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are checking a tool-calling integration. When asked to add numbers, "
            "call the add tool; do not compute the sum yourself.",
        }
    ]
    for index, (a, b) in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": f"Use the add tool to add {a} and {b}."})
        response = adapter.parse(_timed(adapter, report, messages, tools=[ADD_TOOL]).completion)
        calls = [c for c in response.tool_calls if c["name"] == "add"]
        if not calls:
            report.problems.append(
                "tool calling: the model answered without calling the offered tool "
                f"(reply: {response.text[:120]!r}); this product needs a model and server with "
                "function calling enabled (for vLLM: --enable-auto-tool-choice)"
            )
            return
        report.tool_calling = True
        if index:
            report.tool_history = True
        call = calls[0]
        arguments = call["arguments"]
        result = {"result": int(arguments.get("a", 0)) + int(arguments.get("b", 0))}
        messages.append(assistant_message(response.text, [call]))
        messages.append(tool_message(call["id"], json.dumps(result)))
    messages.append(
        {
            "role": "user",
            "content": 'Reply with only a JSON object {"sum": <the last result>}.',
        }
    )
    exchange = _timed(adapter, report, messages, json_output=True)
    content = exchange.completion.choices[0].message.content or ""
    try:
        parsed = json_parsed(content)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        report.problems.append(
            f"JSON output: asked for a JSON object, the model replied {content[:120]!r}"
        )
        return
    report.json_output = True


def _timed(
    adapter: OpenAICompatibleModel,
    report: Report,
    messages: list[dict[str, Any]],
    **kwargs: Any,
) -> Any:
    started = time.monotonic()
    exchange = adapter.chat(messages, **kwargs)
    report.calls += 1
    report.latency_ms.append(round((time.monotonic() - started) * 1000, 1))
    usage = exchange.completion.usage
    report.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
    report.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
    return exchange


def _explain(failure: ModelFailure, report: Report) -> str:
    step = (
        "sending the tool results back"
        if report.tool_calling
        else "the first request (with a tool offered)"
    )
    timeout = settings.AGENTOPS["MODEL_TIMEOUT_SECONDS"]
    hints: dict[FailureKind, str] = {
        FailureKind.UNAVAILABLE: f"is the server running at {report.server}?",
        FailureKind.TIMEOUT: f"no answer within {timeout:g} s (AGENTOPS_MODEL_TIMEOUT_SECONDS)",
        FailureKind.RATE_LIMITED: "the server is rate limiting; try again later",
        FailureKind.BAD_REQUEST: "the server refused the request shape (tool messages, "
        "tool_call_id or the tools parameter), or the model name or API key is wrong",
        FailureKind.CONTEXT_OVERFLOW: "the model's context window is too small even for this check",
        FailureKind.OUTPUT_INVALID: "the server's answer is not a chat completion",
    }
    return f"{step} failed: {failure} ({hints.get(failure.kind, failure.kind)})"
