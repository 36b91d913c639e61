"""The OpenAI-compatible adapter over real HTTP (a local stand-in server), and the shared parser."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentops.engine.errors import ModelFailure
from agentops.engine.model import ModelRequest, OpenAICompatibleModel, parse_response


class Canned(BaseHTTPRequestHandler):
    """Answers each POST with the next canned (status, headers, body); records the requests."""

    replies: list[tuple[int, dict[str, str], str]] = []
    received: list[dict] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        Canned.received.append(
            {
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "body": json.loads(self.rfile.read(length)),
            }
        )
        status, headers, body = Canned.replies.pop(0)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(settings) -> Iterator[type[Canned]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "OPENAI_BASE_URL": f"http://127.0.0.1:{httpd.server_port}/v1",
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "small-model",
        "MODEL_TIMEOUT_SECONDS": 2.0,
    }
    Canned.replies, Canned.received = [], []
    yield Canned
    httpd.shutdown()


def request() -> ModelRequest:
    return ModelRequest(
        agent="refund",
        task_id=1,
        step=0,
        step_title="Look up",
        attempt=1,
        messages=[{"role": "system", "content": "x"}, {"role": "tool", "content": {"a": 1}}],
        tools=[{"name": "lookup_order", "description": "", "parameters": {}}],
        task_input={},
    )


def completion(message: dict) -> str:
    return json.dumps(
        {"choices": [{"message": message}], "usage": {"prompt_tokens": 11, "completion_tokens": 7}}
    )


def test_a_tool_call_reply_is_parsed_with_usage(server):
    server.replies.append(
        (
            200,
            {},
            completion(
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {
                                "name": "lookup_order",
                                "arguments": '{"order_id": "A1001"}',
                            },
                        }
                    ],
                }
            ),
        )
    )

    response = OpenAICompatibleModel().complete(request())

    assert response.tool_calls == [{"name": "lookup_order", "arguments": {"order_id": "A1001"}}]
    assert response.usage == {"prompt_tokens": 11, "completion_tokens": 7}
    sent = server.received[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer test-key"
    assert sent["body"]["model"] == "small-model"
    assert sent["body"]["messages"][1]["content"] == '{"a": 1}'  # structured content as JSON text
    assert sent["body"]["tools"][0]["function"]["name"] == "lookup_order"


def test_json_content_carries_confidence_and_plans(server):
    server.replies.append(
        (200, {}, completion({"content": '{"plan": [{"title": "Look"}], "confidence": 0.8}'}))
    )

    response = OpenAICompatibleModel().complete(request())

    assert response.plan == [{"title": "Look"}] and response.confidence == 0.8


@pytest.mark.parametrize(
    ("status", "headers", "body", "kind", "retry_after"),
    [
        (429, {"Retry-After": "7"}, "{}", "rate_limited", 7.0),
        (503, {}, "{}", "unavailable", None),
        (400, {}, '{"error": {"code": "context_length_exceeded"}}', "context_overflow", None),
        (200, {}, "not json", "output_invalid", None),
        (200, {}, '{"choices": []}', "output_invalid", None),
        (
            200,
            {},
            completion({"tool_calls": [{"function": {"name": "x", "arguments": "{"}}]}),
            "output_invalid",
            None,
        ),
    ],
    ids=["429", "503", "context", "not-json", "no-choices", "broken-arguments"],
)
def test_http_failures_are_classified(server, status, headers, body, kind, retry_after):
    server.replies.append((status, headers, body))

    with pytest.raises(ModelFailure) as failure:
        OpenAICompatibleModel().complete(request())

    assert failure.value.kind == kind
    assert failure.value.retry_after == retry_after


def test_an_unreachable_server_is_unavailable(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}

    with pytest.raises(ModelFailure) as failure:
        OpenAICompatibleModel().complete(request())
    assert failure.value.kind == "unavailable"


@pytest.mark.parametrize(
    "raw",
    [
        '{"tool_calls": "nope"}',
        '{"tool_calls": [{"name": "a"}, {"name": "b"}]}',
        '{"confidence": 3}',
        '{"plan": []}',
        "[1, 2]",
    ],
)
def test_malformed_model_output_is_output_invalid(raw):
    with pytest.raises(ModelFailure) as failure:
        parse_response(raw, usage={})
    assert failure.value.kind == "output_invalid"
