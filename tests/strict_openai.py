"""A strict OpenAI-compatible chat-completions server for tests, over real HTTP.

Every request body is validated with the `openai` package's own request types (pydantic's
TypeAdapter over `CompletionCreateParamsNonStreaming`), unknown parameters and message fields are
refused, and the conversation must be one a real server accepts: every `tool` message answers an
earlier assistant call by its `tool_call_id`, and every call is answered before the next turn.
Refusals are 400s in OpenAI's error shape. What it answers comes from a `brain` (a function of the
validated body), after any queued canned replies (faults).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, get_args

from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter, ValidationError

from tests.serving import serve_in_thread

PARAMS = TypeAdapter(CompletionCreateParamsNonStreaming)


def _role(message_type: Any) -> str:
    found = re.search(r"Literal\['(\w+)'\]", message_type.__annotations__["role"].__forward_arg__)
    assert found is not None
    return found.group(1)


# The fields each role's message may carry, from the SDK's own message types.
ROLE_FIELDS = {_role(t): frozenset(t.__annotations__) for t in get_args(ChatCompletionMessageParam)}
ROLE_ADAPTERS = {_role(t): TypeAdapter(t) for t in get_args(ChatCompletionMessageParam)}
TOP_FIELDS = frozenset(CompletionCreateParamsNonStreaming.__annotations__)
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

Brain = Callable[[dict[str, Any]], dict[str, Any]]


class Refused(Exception):
    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


def _forced(value: Any) -> Any:
    """pydantic validates `Iterable[...]` lazily: walk it so every item is validated."""
    if isinstance(value, dict):
        return {k: _forced(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, Iterator)):
        return [_forced(v) for v in value]
    return value


def check_request(body: Any, *, reject_tool_messages: bool = False) -> dict[str, Any]:
    """The body as a real server would accept it, or Refused saying why."""
    if not isinstance(body, dict):
        raise Refused("the request body must be a JSON object")
    unknown = sorted(set(body) - TOP_FIELDS)
    if unknown:
        raise Refused(f"Unrecognized request argument supplied: {', '.join(unknown)}")
    for index, message in enumerate(body.get("messages") or []):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLE_ADAPTERS:
            raise Refused(f"messages[{index}]: unknown role {role!r}", param=f"messages.[{index}]")
        try:
            _forced(ROLE_ADAPTERS[role].validate_python(message))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"]))
            raise Refused(
                f"Invalid request: messages[{index}] ({role}).{where}: {first['msg']}",
                param=f"messages.[{index}].{where}",
            ) from None
    if body.get("stream"):
        raise Refused("streaming is not supported by this test server", param="stream")
    try:
        checked = _forced(PARAMS.validate_python(body))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise Refused(
            f"Invalid request: {'.'.join(map(str, first['loc']))}: {first['msg']}",
            param=".".join(map(str, first["loc"])),
        ) from None
    for tool in checked.get("tools") or []:
        name = tool.get("function", {}).get("name", "")
        if not TOOL_NAME.match(name):
            raise Refused(f"Invalid tool name {name!r}", param="tools")
        parameters = tool["function"].get("parameters")
        if parameters is not None and parameters.get("type") != "object":
            raise Refused(f"tool {name}: parameters must be a JSON schema object", param="tools")
    _check_conversation(body["messages"], reject_tool_messages=reject_tool_messages)
    return checked


def _check_conversation(messages: list[dict[str, Any]], *, reject_tool_messages: bool) -> None:
    if not messages:
        raise Refused("messages must not be empty", param="messages")
    open_calls: set[str] = set()
    seen_calls: set[str] = set()
    for index, message in enumerate(messages):
        role = message["role"]
        extra = set(message) - ROLE_FIELDS[role]
        if extra:
            raise Refused(
                f"messages[{index}]: unknown fields {sorted(extra)} for role {role}",
                param=f"messages.[{index}]",
            )
        if role == "tool":
            if reject_tool_messages:
                raise Refused(
                    f"messages[{index}]: role 'tool' is not supported", param=f"messages.[{index}]"
                )
            call_id = message["tool_call_id"]
            if call_id not in open_calls:
                raise Refused(
                    f"Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (messages[{index}].tool_call_id "
                    f"{call_id!r} answers no earlier call)",
                    param=f"messages.[{index}].tool_call_id",
                )
            open_calls.discard(call_id)
            continue
        if open_calls:
            raise Refused(
                f"An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {sorted(open_calls)}",
                param=f"messages.[{index}].role",
            )
        for call in message.get("tool_calls") or [] if role == "assistant" else []:
            if call["id"] in seen_calls:
                raise Refused(f"duplicate tool call id {call['id']!r}", param="messages")
            try:
                json.loads(call["function"]["arguments"])
            except ValueError:
                raise Refused(
                    f"messages[{index}]: tool call arguments are not valid JSON", param="messages"
                ) from None
            seen_calls.add(call["id"])
            open_calls.add(call["id"])
    if open_calls:
        raise Refused(f"tool calls left unanswered: {sorted(open_calls)}", param="messages")


def estimate_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


@dataclass
class StrictServer:
    """The server's state: the brain, queued faults, options and what it received."""

    brain: Brain
    faults: list[tuple[int, dict[str, str], str]] = field(default_factory=list)
    reject_tool_messages: bool = False
    context_window: int | None = None
    received: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], str]:
        with self.lock:
            if self.faults:
                return self.faults.pop(0)
        if not headers.get("authorization", "").startswith("Bearer "):
            return _error(401, "You didn't provide an API key.", code="invalid_api_key")
        try:
            body = json.loads(raw)
            checked = check_request(body, reject_tool_messages=self.reject_tool_messages)
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.")
        except Refused as refused:
            with self.lock:
                self.refused.append(str(refused))
            return _error(400, str(refused), code=refused.code, param=refused.param)
        prompt = estimate_tokens(body["messages"])
        if self.context_window is not None and prompt > self.context_window:
            return _error(
                400,
                f"This model's maximum context length is {self.context_window} tokens. However, "
                f"your messages resulted in {prompt} tokens.",
                code="context_length_exceeded",
                param="messages",
            )
        with self.lock:
            self.received.append(body)
        message = self.brain(checked)
        completion = estimate_tokens(message)
        reply = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, **message},
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(reply)


def _error(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> tuple[int, dict[str, str], str]:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }
    return status, {"Content-Type": "application/json"}, json.dumps(body)


def serve(state: StrictServer) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                status, headers, text = _error(404, f"unknown path {self.path}")
            else:
                status, headers, text = state.answer(
                    {k.lower(): v for k, v in self.headers.items()}, raw
                )
            data = text.encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(httpd)
    state.url = f"http://127.0.0.1:{httpd.server_port}/v1"
    return httpd, state.url


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "id": f"call_{uuid.uuid4().hex[:16]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    }


def _tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results = []
    for message in messages:
        if message["role"] == "tool":
            content = message["content"]
            try:
                results.append(json.loads(content) if isinstance(content, str) else {})
            except ValueError:
                results.append({})
    return results


def refund_brain(body: dict[str, Any]) -> dict[str, Any]:
    """What a competent model does for the refund agent: one tool call per step, read from the
    goal, the input and the earlier tool results in the conversation."""
    messages = body["messages"]
    texts = [
        m["content"] for m in messages if m["role"] == "user" and isinstance(m["content"], str)
    ]
    step = int(re.search(r"Now do step (\d+) of", texts[-1]).group(1)) - 1
    found = re.search(r"Input: (\{.*\})", next(t for t in texts if t.startswith("Goal:")))
    task_input = json.loads(found.group(1)) if found else {}
    order_id = str(task_input.get("order_id", "A1001"))
    facts: dict[str, Any] = {}
    for result in _tool_results(messages):
        if isinstance(result, dict) and "amount" in result:
            facts = result
    summary = "\n".join(
        m["content"] for m in messages if m["role"] == "system" and isinstance(m["content"], str)
    )
    if not facts and step >= 3:
        amount_match = re.search(r'"amount":(\d+(?:\.\d+)?)', summary)
        email_match = re.search(r'"customer_email":"([^"]+)"', summary)
        facts = {
            "amount": float(amount_match.group(1)) if amount_match else 0,
            "customer_email": email_match.group(1) if email_match else None,
        }
    amount = task_input.get("amount") or facts.get("amount") or 0
    email = facts.get("customer_email") or f"customer-{order_id.lower()}@example.com"
    plan = [
        ("lookup_order", {"order_id": order_id}),
        (
            "check_eligibility",
            {"order_id": order_id, "reason": task_input.get("reason", "damaged")},
        ),
        ("track_shipment", {"order_id": order_id}),
        ("issue_refund", {"order_id": order_id, "amount": amount, "currency": "EUR"}),
        (
            "email_customer",
            {
                "to": email,
                "subject": f"Your refund for order {order_id}",
                "body": f"We refunded {amount} EUR for order {order_id}.",
            },
        ),
    ]
    name, arguments = plan[step]
    return tool_call(name, arguments)


def preflight_brain(body: dict[str, Any]) -> dict[str, Any]:
    """Answers `model check`: calls the offered tool until two results came back, then JSON."""
    if (body.get("response_format") or {}).get("type") == "json_object":
        results = _tool_results(body["messages"])
        return {"content": json.dumps({"sum": results[-1].get("result") if results else None})}
    tools = body.get("tools") or []
    asked = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    numbers = [int(n) for n in re.findall(r"\d+", asked)]
    if tools and len(numbers) >= 2:
        name = tools[0]["function"]["name"]
        return tool_call(name, {"a": numbers[0], "b": numbers[1]})
    return {"content": "done"}
