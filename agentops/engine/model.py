"""Model adapters: one interface, a scripted model for offline runs and the official OpenAI SDK.

Both adapters return raw output that goes through the same parser, so a scripted "invalid JSON"
fault exercises exactly the path a real model's broken output takes. Adapters raise ModelFailure
with a kind (rate_limited, timeout, unavailable, output_invalid, context_overflow, bad_request).
The SDK client never retries (`max_retries=0`): retries are the engine's, persisted and counted.
The SDK is imported when the OpenAI adapter is first used, not with this module: importing it is
about half of a worker's start-up, and a process on the scripted model never needs it.
Every tool call carries an id, recorded with the step's model response, so a context rebuilt after
a crash answers the same ids.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings

from agentops.engine.errors import FailureKind, ModelFailure
from agentops.engine.jsonvalues import (
    canonical_json,
    is_pointer,
    json_bytes,
    json_parsed,
    loaded,
    output_checked,
)
from agentops.engine.redaction import redacted_cut
from agentops.engine.retry_after import retry_after_seconds

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

    from agentops.engine.registry import Agent


@dataclass(frozen=True)
class ModelRequest:
    agent: str
    task_id: int
    step: int
    step_title: str
    attempt: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    task_input: dict[str, Any]
    planning: bool = False
    # The engine's estimate of `messages`, made while building them (None: not made).
    prompt_estimate: int | None = None
    # The plan's tool for the step and its instruction (a person may have repaired the plan).
    step_tool: str | None = None
    instruction: str = ""

    def latest_tool_result(self, key: str) -> dict[str, Any]:
        """The newest tool result in the context that has `key` ({} if none): what a model reads
        back from earlier steps. Scripted agents use it instead of peeking at the database."""
        for message in reversed(self.messages):
            content = message.get("content")
            if message.get("role") == "tool" and isinstance(content, str):
                with contextlib.suppress(ValueError):
                    content = json.loads(content)
            if message.get("role") == "tool" and isinstance(content, dict) and key in content:
                return content
        return {}

    def executed_arguments(self, *tools: str) -> dict[str, Any]:
        """The arguments the ledger ran for the newest call of one of `tools` ({} if none):
        a person's edit of a gated action included. Agents must read effects from here (or from
        the tool's result), never from what the model proposed."""
        for message in reversed(self.messages):
            for call in reversed(message.get("tool_calls") or []):
                function = call.get("function") or {}  # the chat-completions wire format
                if function.get("name") not in tools:
                    continue
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    continue
                if isinstance(arguments, dict):
                    return arguments
        return {}


@dataclass(frozen=True)
class ModelResponse:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    confidence: float | None = None
    plan: list[dict[str, Any]] | None = None
    # What the model read on (`excerpts.Reading`) before this reply: recorded with the model
    # result's event, not in the record.
    reads: list[dict[str, Any]] = field(default_factory=list)

    def as_record(self) -> dict[str, Any]:
        """The response as the step records it: fresh containers (the caller may add to them),
        the JSON values in them shared (nothing changes a recorded value in place)."""
        return {
            "text": self.text,
            "tool_calls": [dict(call) for call in self.tool_calls],
            "usage": dict(self.usage),
            "confidence": self.confidence,
            "plan": None if self.plan is None else [dict(step) for step in self.plan],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ModelResponse:
        return cls(**record)


@dataclass(frozen=True)
class SummaryRequest:
    """A request for a summary of a task's earlier work (`engine.summaries`): `messages` ask for
    it in plain text, from `lines` (the rule-based summary's lines), in at most `max_tokens`,
    answered within `timeout` seconds."""

    agent: str
    task_id: int
    step: int
    messages: list[dict[str, Any]]
    lines: list[str]
    max_tokens: int
    timeout: float
    task_input: dict[str, Any]


def record_pointing_at(record: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """The response record with its call's arguments replaced by `arguments`, the pointer to
    the artifact the ledger row stores them in (exactly the proposal): a large proposal is
    stored once, and the record stays small enough to keep in the row."""
    first, *rest = record["tool_calls"]
    return {**record, "tool_calls": [{**first, "arguments": arguments}, *rest]}


def loaded_response(value: Any, load: Callable[[Any], Any] = loaded) -> Any:
    """A recorded model response as the model gave it: the record (`loaded`), with its calls'
    arguments loaded where they point at their artifact (see `record_pointing_at`). `load`
    reads a pointer back (`loaded` by default)."""
    record = load(value)
    calls = record.get("tool_calls") if isinstance(record, dict) else None
    if not isinstance(calls, list) or not any(
        isinstance(call, dict) and is_pointer(call.get("arguments")) for call in calls
    ):
        return record
    return {
        **record,
        "tool_calls": [
            {**call, "arguments": load(call["arguments"])}
            if isinstance(call, dict) and is_pointer(call.get("arguments"))
            else call
            for call in calls
        ],
    }


class ModelAdapter(Protocol):
    name: str
    model: str

    def complete(self, request: ModelRequest) -> ModelResponse: ...


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_response(raw: str, *, usage: dict[str, int], checked: bool = False) -> ModelResponse:
    """Parse the model's JSON output; anything malformed is ModelFailure(output_invalid).
    `checked`: `raw` is the text of a reply that passed `checked_reply` already."""
    try:
        data = json_parsed(raw)
    except (TypeError, ValueError) as exc:
        raise ModelFailure(
            f"model output is not JSON: {exc}", kind=FailureKind.OUTPUT_INVALID
        ) from None
    return response_from(data, usage=usage, checked=checked)


def checked_reply(reply: Any) -> Any:
    """The model's reply as it gave it, if it can be stored (`jsonvalues.output_checked`, the
    rule tool results pass too); else ModelFailure(output_invalid) naming the path, e.g.
    `reply.tool_calls[0].arguments.note: contains a lone surrogate (\\ud800), ...`."""
    return output_checked(reply, path="reply", failure=ModelFailure, source="the model's reply")


def response_from(data: Any, *, usage: dict[str, int], checked: bool = False) -> ModelResponse:
    """The response in the model's parsed output; anything malformed, or anything the engine
    could not store (`checked_reply`), is ModelFailure(output_invalid). Every reply of every
    adapter passes here, so what a response holds is storable as is. `checked`: `data` is
    read back from the text of a reply that passed `checked_reply` (the scripted model's): it
    is the same value, so it is not walked again."""
    if not isinstance(data, dict):
        raise ModelFailure("model output is not a JSON object", kind=FailureKind.OUTPUT_INVALID)
    if not checked:
        checked_reply(data)
    calls = data.get("tool_calls") or []
    if not isinstance(calls, list) or not all(
        isinstance(c, dict)
        and isinstance(c.get("name"), str)
        and isinstance(c.get("arguments", {}), dict)
        and isinstance(c.get("id", ""), str)
        for c in calls
    ):
        raise ModelFailure("model output has malformed tool_calls", kind=FailureKind.OUTPUT_INVALID)
    if len(calls) > 1:
        raise ModelFailure(
            "model proposed more than one tool call in a step", kind=FailureKind.OUTPUT_INVALID
        )
    confidence = data.get("confidence")
    if confidence is not None and not (
        isinstance(confidence, (int, float)) and 0 <= confidence <= 1
    ):
        raise ModelFailure(
            "model confidence must be a number in [0, 1]", kind=FailureKind.OUTPUT_INVALID
        )
    plan = data.get("plan")
    if plan is not None and not (
        isinstance(plan, list)
        and plan
        and all(isinstance(p, dict) and p.get("title") for p in plan)
    ):
        raise ModelFailure(
            "model plan must be a non-empty list of steps", kind=FailureKind.OUTPUT_INVALID
        )
    return ModelResponse(
        text=str(data.get("text") or ""),
        tool_calls=[
            {
                "id": c.get("id") or new_call_id(),
                "name": c["name"],
                "arguments": c.get("arguments", {}),
            }
            for c in calls
        ],
        usage=usage,
        confidence=float(confidence) if confidence is not None else None,
        plan=plan,
    )


def estimate_tokens(value: Any) -> int:
    return max(1, len(canonical_json(value)) // 4)


class ScriptedModel:
    """Deterministic and offline: the agent's `script` decides the reply for each step.

    Faults are injected per step and attempt through the task input, e.g.
    `{"model_faults": {"2": ["429", "invalid_json"]}}` fails the first two attempts of step 2;
    `{"model_seconds": 2}` makes every call take two seconds, as a real model's does (the
    benchmarks and the chaos run hold many calls in flight with it).
    """

    FAULTS = ("429", "timeout", "5xx", "invalid_json", "context_overflow")
    name = "scripted"
    model = "scripted"

    def complete(self, request: ModelRequest) -> ModelResponse:
        from agentops.engine.registry import get_agent

        _log_call(request)
        time.sleep(float(request.task_input.get("model_seconds") or 0))
        self._maybe_fail(request)
        agent = get_agent(request.agent)
        if agent.script is None:
            raise ModelFailure(f"agent {agent.name} has no script", kind=FailureKind.UNAVAILABLE)
        # A script's reply is a Python value: what cannot be stored cannot be sent either, and
        # fails the step with its path like any model's reply (see `response_from`).
        reply = checked_reply(agent.script(request))
        # The reply as a provider sends it: compact JSON text, which is also what the
        # completion's tokens are estimated from (no second serialization).
        raw = wire_text(reply)
        usage = {
            "prompt_tokens": request.prompt_estimate or estimate_tokens(request.messages),
            "completion_tokens": max(1, len(raw) // 4),
        }
        return parse_response(raw, usage=usage, checked=True)

    def summarize(self, request: SummaryRequest) -> ModelResponse:
        """The scripted model's summary: each summarized step's line cut to its title, tool and
        status, as plain text within `max_tokens` (four characters a token). Task input
        `summary_faults` fails it (`"timeout"`, `"5xx"`), `summary_seconds` makes it take that
        long: longer than the deadline, it gives up at the deadline, as a client's timeout
        does."""
        seconds = float(request.task_input.get("summary_seconds") or 0)
        time.sleep(min(seconds, request.timeout))
        if seconds > request.timeout:
            raise ModelFailure(
                f"the summary took longer than its {request.timeout:g} s deadline",
                kind=FailureKind.TIMEOUT,
            )
        faults = request.task_input.get("summary_faults") or []
        if "timeout" in faults:
            raise ModelFailure("model call timed out", kind=FailureKind.TIMEOUT)
        if "5xx" in faults:
            raise ModelFailure("model server error (503)", kind=FailureKind.UNAVAILABLE)
        done = [line.split(": ", 1)[0] for line in request.lines]
        text = f"{len(done)} earlier steps: " + "; ".join(done) + "."
        text = text[: request.max_tokens * 4]
        usage = {
            "prompt_tokens": estimate_tokens(request.messages),
            "completion_tokens": max(1, len(text) // 4),
        }
        return ModelResponse(text=text, usage=usage)

    def _maybe_fail(self, request: ModelRequest) -> None:
        faults = (request.task_input.get("model_faults") or {}).get(str(request.step)) or []
        if request.attempt > len(faults):
            return
        fault = faults[request.attempt - 1]
        if fault == "429":
            raise ModelFailure(
                "model rate limited (429)", kind=FailureKind.RATE_LIMITED, retry_after=1.0
            )
        if fault == "timeout":
            raise ModelFailure("model call timed out", kind=FailureKind.TIMEOUT)
        if fault == "5xx":
            raise ModelFailure("model server error (503)", kind=FailureKind.UNAVAILABLE)
        if fault == "context_overflow":
            raise ModelFailure("context window exceeded", kind=FailureKind.CONTEXT_OVERFLOW)
        if fault == "invalid_json":
            parse_response('{"tool_calls": [{"name": ', usage={})


def wire_text(reply: dict[str, Any]) -> str:
    """A scripted reply as a provider sends it: compact JSON text, keys in the reply's order
    (`json.dumps`'s text; a short reply with long strings is written by pydantic-core, see
    `jsonvalues.json_bytes`)."""
    return json_bytes(reply, sort_keys=False).decode()


def wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The context's messages as the chat-completions API takes them: structured content (a
    tool's result) becomes JSON text; everything else is already in the wire format."""
    return [
        {
            **m,
            "content": m["content"]
            if m.get("content") is None or isinstance(m.get("content"), str)
            else json.dumps(m["content"], ensure_ascii=False),
        }
        for m in messages
    ]


def assistant_message(text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant turn in the wire format; `calls` are {id, name, arguments} records."""
    if not calls:
        return {"role": "assistant", "content": text}
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": canonical_json(call.get("arguments") or {}),
                },
            }
            for call in calls
        ],
    }


def tool_message(call_id: str, content: Any) -> dict[str, Any]:
    """A tool result answering the call `call_id` (structured content becomes JSON on the wire)."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def wire_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": t} for t in tools]


@functools.cache
def _client(base_url: str, api_key: str, timeout: float) -> openai.OpenAI:
    """One SDK client per configuration and process (session state, never persisted)."""
    import openai

    return openai.OpenAI(
        base_url=base_url, api_key=api_key or "not-set", timeout=timeout, max_retries=0
    )


def _detail(exc: openai.APIStatusError) -> str:
    """The server's own error message when it sent one in OpenAI's shape, else the SDK's."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return exc.message


def _is_context_error(exc: openai.APIStatusError) -> bool:
    code = str(getattr(exc, "code", "") or "")
    text = f"{code} {exc.message}".lower()
    return (
        "context_length" in text
        or "maximum context length" in text
        or "context window" in text
        or exc.status_code == 413
    )


def model_failure(exc: openai.OpenAIError) -> ModelFailure:
    """Map an SDK error onto the engine's failure kinds."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return ModelFailure("model call timed out", kind=FailureKind.TIMEOUT)
    if isinstance(exc, openai.APIConnectionError):
        return ModelFailure(f"model server unreachable: {exc}", kind=FailureKind.UNAVAILABLE)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status == 429:
            return ModelFailure(
                "model rate limited (429)",
                kind=FailureKind.RATE_LIMITED,
                retry_after=retry_after_seconds(exc.response.headers),
            )
        if status >= 500:
            return ModelFailure(f"model server error ({status})", kind=FailureKind.UNAVAILABLE)
        if _is_context_error(exc):
            return ModelFailure(
                f"context window exceeded ({status}): {redacted_cut(_detail(exc), 300)}",
                kind=FailureKind.CONTEXT_OVERFLOW,
            )
        return ModelFailure(
            f"model request refused ({status}): {redacted_cut(_detail(exc), 500)}",
            kind=FailureKind.BAD_REQUEST,
            retryable=False,
        )
    return ModelFailure(f"unexpected model response: {exc}", kind=FailureKind.OUTPUT_INVALID)


@dataclass(frozen=True)
class Exchange:
    """One raw chat-completions round trip: what `model check` reports on."""

    completion: ChatCompletion
    seconds: float


def _function_call(call: object) -> dict[str, Any]:
    """One tool call of a completion as the runner reads it; only function calls are tools."""
    from openai.types.chat import ChatCompletionMessageFunctionToolCall

    if not isinstance(call, ChatCompletionMessageFunctionToolCall):
        raise ValueError(f"a {getattr(call, 'type', '?')} tool call is not a function call")
    return {
        "id": call.id,
        "name": call.function.name,
        "arguments": json_parsed(call.function.arguments or "{}"),
    }


class OpenAICompatibleModel:
    """Chat completions through the official `openai` SDK, against any compatible server."""

    name = "openai"

    def __init__(self, *, model: str | None = None) -> None:
        conf = settings.AGENTOPS
        self.base_url = conf["OPENAI_BASE_URL"].rstrip("/")
        self.model = model or conf["OPENAI_MODEL"]
        self.client = _client(
            self.base_url, conf["OPENAI_API_KEY"], float(conf["MODEL_TIMEOUT_SECONDS"])
        )

    def complete(self, request: ModelRequest) -> ModelResponse:
        _log_call(request)
        exchange = self.chat(request.messages, tools=request.tools, json_output=request.planning)
        return self.parse(exchange.completion)

    def summarize(self, request: SummaryRequest) -> ModelResponse:
        """A plain-text summary in at most `max_tokens`, answered within `timeout` seconds
        (past it, the SDK's timeout: ModelFailure(timeout))."""
        exchange = self.chat(
            request.messages, max_tokens=request.max_tokens, timeout=request.timeout
        )
        try:
            text = exchange.completion.choices[0].message.content or ""
        except (AttributeError, IndexError) as exc:
            raise ModelFailure(
                f"unexpected model response: {exc}", kind=FailureKind.OUTPUT_INVALID
            ) from None
        usage = exchange.completion.usage
        counted = {
            "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
            "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        }
        return ModelResponse(text=text, usage=counted)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_output: bool = False,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> Exchange:
        """One request; SDK errors become ModelFailure with the engine's kinds. `max_tokens`
        caps the reply; `timeout` replaces the client's deadline for this request."""
        import openai
        from openai.types.chat import ChatCompletion

        params: dict[str, Any] = {"model": self.model, "messages": wire_messages(messages)}
        if tools:
            params["tools"] = wire_tools(tools)
        if json_output:
            params["response_format"] = {"type": "json_object"}
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        client = self.client if timeout is None else self.client.with_options(timeout=timeout)
        started = time.monotonic()
        try:
            completion = client.chat.completions.create(**params)
        except openai.OpenAIError as exc:
            raise model_failure(exc) from None
        except ValueError as exc:  # a 200 whose body is not JSON
            raise ModelFailure(
                f"the model server's answer is not JSON: {exc}", kind=FailureKind.OUTPUT_INVALID
            ) from None
        except RecursionError:  # a 200 whose body is nested too deeply for json to read
            raise ModelFailure(
                "the model server's answer is nested too deeply to read",
                kind=FailureKind.OUTPUT_INVALID,
            ) from None
        if not isinstance(completion, ChatCompletion):
            raise ModelFailure(
                "the model server did not answer with a completion", kind=FailureKind.OUTPUT_INVALID
            )
        return Exchange(completion=completion, seconds=time.monotonic() - started)

    def parse(self, completion: ChatCompletion) -> ModelResponse:
        try:
            message = completion.choices[0].message
            calls = [_function_call(c) for c in message.tool_calls or []]
            content = message.content or ""
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise ModelFailure(
                f"unexpected model response: {exc}", kind=FailureKind.OUTPUT_INVALID
            ) from None
        reply: dict[str, Any] = {"text": content, "tool_calls": calls}
        if content.lstrip().startswith("{"):
            # Plain text that merely starts with a brace stays text.
            with contextlib.suppress(ValueError):
                parsed = json_parsed(content)
                if isinstance(parsed, dict):
                    reply.update(parsed)
                    if not parsed.get("tool_calls"):
                        reply["tool_calls"] = calls
        usage = completion.usage
        counted = {
            "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
            "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        }
        # Every text in it was parsed once (JSON values only): checked as it is, not written out
        # and parsed again.
        return response_from(reply, usage=counted)


def _log_call(request: ModelRequest) -> None:
    """Append one line per model request to AGENTOPS_MODEL_CALL_LOG (tests count them)."""
    path = os.environ.get("AGENTOPS_MODEL_CALL_LOG")
    if not path:
        return
    line = json.dumps({"task": request.task_id, "step": request.step, "attempt": request.attempt})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def get_model_adapter(agent: Agent | None = None) -> ModelAdapter:
    """The agent's adapter and model when it names them, else the settings' default."""
    name = (agent.adapter if agent else None) or settings.AGENTOPS["MODEL_ADAPTER"]
    if name == "scripted":
        return ScriptedModel()
    if name == "openai":
        return OpenAICompatibleModel(model=agent.model if agent else None)
    raise ValueError(f"AGENTOPS_MODEL_ADAPTER: unknown adapter {name!r}")
