"""Model adapters: one interface, a scripted model for offline runs and an OpenAI-compatible one.

Both adapters return raw output that goes through the same parser, so a scripted "invalid JSON"
fault exercises exactly the path a real model's broken output takes. Adapters raise ModelFailure
with a kind (rate_limited, timeout, unavailable, output_invalid, context_overflow).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import httpx
from django.conf import settings

from agentops.engine.errors import ModelFailure
from agentops.engine.jsonvalues import canonical_json


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

    def latest_tool_result(self, key: str) -> dict[str, Any]:
        """The newest tool result in the context that has `key` ({} if none): what a model reads
        back from earlier steps. Scripted agents use it instead of peeking at the database."""
        for message in reversed(self.messages):
            content = message.get("content")
            if message.get("role") == "tool" and isinstance(content, dict) and key in content:
                return content
        return {}

    def executed_arguments(self, *tools: str) -> dict[str, Any]:
        """The arguments the ledger ran for the newest call of one of `tools` ({} if none):
        a person's edit of a gated action included. Agents must read effects from here (or from
        the tool's result), never from what the model proposed."""
        for message in reversed(self.messages):
            for call in reversed(message.get("tool_calls") or []):
                arguments = call.get("arguments")
                if call.get("name") in tools and isinstance(arguments, dict):
                    return arguments
        return {}


@dataclass(frozen=True)
class ModelResponse:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    confidence: float | None = None
    plan: list[dict[str, Any]] | None = None

    def as_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ModelResponse:
        return cls(**record)


class ModelAdapter(Protocol):
    def complete(self, request: ModelRequest) -> ModelResponse: ...


def parse_response(raw: str, *, usage: dict[str, int]) -> ModelResponse:
    """Parse the model's JSON output; anything malformed is ModelFailure(output_invalid)."""
    try:
        data = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise ModelFailure(f"model output is not JSON: {exc}", kind="output_invalid") from None
    if not isinstance(data, dict):
        raise ModelFailure("model output is not a JSON object", kind="output_invalid")
    calls = data.get("tool_calls") or []
    if not isinstance(calls, list) or not all(
        isinstance(c, dict)
        and isinstance(c.get("name"), str)
        and isinstance(c.get("arguments", {}), dict)
        for c in calls
    ):
        raise ModelFailure("model output has malformed tool_calls", kind="output_invalid")
    if len(calls) > 1:
        raise ModelFailure(
            "model proposed more than one tool call in a step", kind="output_invalid"
        )
    confidence = data.get("confidence")
    if confidence is not None and not (
        isinstance(confidence, (int, float)) and 0 <= confidence <= 1
    ):
        raise ModelFailure("model confidence must be a number in [0, 1]", kind="output_invalid")
    plan = data.get("plan")
    if plan is not None and not (
        isinstance(plan, list)
        and plan
        and all(isinstance(p, dict) and p.get("title") for p in plan)
    ):
        raise ModelFailure("model plan must be a non-empty list of steps", kind="output_invalid")
    return ModelResponse(
        text=str(data.get("text") or ""),
        tool_calls=[{"name": c["name"], "arguments": c.get("arguments", {})} for c in calls],
        usage=usage,
        confidence=float(confidence) if confidence is not None else None,
        plan=plan,
    )


def estimate_tokens(value: Any) -> int:
    return max(1, len(canonical_json(value)) // 4)


class ScriptedModel:
    """Deterministic and offline: the agent's `script` decides the reply for each step.

    Faults are injected per step and attempt through the task input, e.g.
    `{"model_faults": {"2": ["429", "invalid_json"]}}` fails the first two attempts of step 2.
    """

    FAULTS = ("429", "timeout", "5xx", "invalid_json", "context_overflow")

    def complete(self, request: ModelRequest) -> ModelResponse:
        from agentops.engine.registry import get_agent

        _log_call(request)
        self._maybe_fail(request)
        agent = get_agent(request.agent)
        if agent.script is None:
            raise ModelFailure(f"agent {agent.name} has no script", kind="unavailable")
        reply = agent.script(request)
        usage = {
            "prompt_tokens": estimate_tokens(request.messages),
            "completion_tokens": estimate_tokens(reply),
        }
        return parse_response(json.dumps(reply), usage=usage)

    def _maybe_fail(self, request: ModelRequest) -> None:
        faults = (request.task_input.get("model_faults") or {}).get(str(request.step)) or []
        if request.attempt > len(faults):
            return
        fault = faults[request.attempt - 1]
        if fault == "429":
            raise ModelFailure("model rate limited (429)", kind="rate_limited", retry_after=1.0)
        if fault == "timeout":
            raise ModelFailure("model call timed out", kind="timeout")
        if fault == "5xx":
            raise ModelFailure("model server error (503)", kind="unavailable")
        if fault == "context_overflow":
            raise ModelFailure("context window exceeded", kind="context_overflow")
        if fault == "invalid_json":
            parse_response('{"tool_calls": [{"name": ', usage={})


class OpenAICompatibleModel:
    """Chat-completions over HTTP against any OpenAI-compatible server (configured by env)."""

    def __init__(self) -> None:
        conf = settings.AGENTOPS
        self.base_url = conf["OPENAI_BASE_URL"].rstrip("/")
        self.model = conf["OPENAI_MODEL"]
        self.timeout = conf["MODEL_TIMEOUT_SECONDS"]
        self.headers = {"Authorization": f"Bearer {conf['OPENAI_API_KEY']}"}

    def complete(self, request: ModelRequest) -> ModelResponse:
        _log_call(request)
        messages = [
            {
                **m,
                "content": m["content"]
                if isinstance(m.get("content"), str)
                else json.dumps(m.get("content")),
            }
            for m in request.messages
        ]
        body = {
            "model": self.model,
            "messages": messages,
            "tools": [{"type": "function", "function": t} for t in request.tools] or None,
            "response_format": {"type": "json_object"} if request.planning else None,
        }
        try:
            response = httpx.post(
                f"{self.base_url}/chat/completions",
                json={k: v for k, v in body.items() if v is not None},
                headers=self.headers,
                timeout=self.timeout,
            )
        except httpx.TimeoutException:
            raise ModelFailure("model call timed out", kind="timeout") from None
        except httpx.TransportError as exc:
            raise ModelFailure(f"model unreachable: {exc}", kind="unavailable") from None
        self._raise_for_status(response)
        return self._parse(response)

    def _raise_for_status(self, response: httpx.Response) -> None:
        if response.status_code == 429:
            retry_after = response.headers.get("Retry-After")
            raise ModelFailure(
                "model rate limited (429)",
                kind="rate_limited",
                retry_after=float(retry_after) if retry_after else None,
            )
        if response.status_code >= 500:
            raise ModelFailure(f"model server error ({response.status_code})", kind="unavailable")
        if response.status_code == 400 and "context_length" in response.text:
            raise ModelFailure("context window exceeded", kind="context_overflow")
        if response.status_code >= 400:
            raise ModelFailure(
                f"model request refused ({response.status_code})",
                kind="unavailable",
                retryable=False,
            )

    def _parse(self, response: httpx.Response) -> ModelResponse:
        try:
            data = response.json()
            message = data["choices"][0]["message"]
            usage = data.get("usage") or {}
            calls = [
                {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                for c in message.get("tool_calls") or []
            ]
            content = message.get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelFailure(f"unexpected model response: {exc}", kind="output_invalid") from None
        reply: dict[str, Any] = {"text": content, "tool_calls": calls}
        if content.lstrip().startswith("{"):
            # Plain text that merely starts with a brace stays text.
            with contextlib.suppress(ValueError):
                reply.update(json.loads(content))
        usage = {
            "prompt_tokens": int(usage.get("prompt_tokens", 0)),
            "completion_tokens": int(usage.get("completion_tokens", 0)),
        }
        return parse_response(json.dumps(reply), usage=usage)


def _log_call(request: ModelRequest) -> None:
    """Append one line per model request to AGENTOPS_MODEL_CALL_LOG (tests count them)."""
    path = os.environ.get("AGENTOPS_MODEL_CALL_LOG")
    if not path:
        return
    line = json.dumps({"task": request.task_id, "step": request.step, "attempt": request.attempt})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def get_model_adapter() -> ModelAdapter:
    name = settings.AGENTOPS["MODEL_ADAPTER"]
    if name == "scripted":
        return ScriptedModel()
    if name == "openai":
        return OpenAICompatibleModel()
    raise ValueError(f"AGENTOPS_MODEL_ADAPTER: unknown adapter {name!r}")
