"""The OpenAI SDK adapter against a strict local server (real HTTP), and the shared parser.

The server validates every request with the openai package's own request types and refuses what
a real server refuses; `test_the_strict_server_refuses_...` shows it would have refused the old
request shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import hypothesis
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agentops.engine import task_create
from agentops.engine.errors import ModelFailure
from agentops.engine.model import (
    ModelRequest,
    OpenAICompatibleModel,
    assistant_message,
    parse_response,
    tool_message,
)
from agentops.engine.retry_after import retry_after_seconds
from tests.agentops.test_jsonvalues import ON_THE_WIRE, json_objects, with_unstorable_parts
from tests.agentops.test_runner import assert_stopped_by_the_reply
from tests.builders import run_until_parked_or_done
from tests.conftest import ROOT
from tests.strict_openai import (
    Refused,
    StrictServer,
    check_request,
    preflight_brain,
    serve,
    tool_call,
)


def lookup_brain(body: dict) -> dict:
    return tool_call("lookup_order", {"order_id": "A1001"})


@pytest.fixture
def strict(settings) -> Iterator[StrictServer]:
    state = StrictServer(brain=lookup_brain)
    httpd, url = serve(state)
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "small-model",
        "MODEL_TIMEOUT_SECONDS": 1.0,
    }
    yield state
    httpd.shutdown()


HISTORY = [
    {"role": "system", "content": "You refund orders."},
    {"role": "user", "content": "Goal: refund A1001"},
    assistant_message(
        "", [{"id": "call_1", "name": "lookup_order", "arguments": {"order_id": "A1"}}]
    ),
    tool_message("call_1", {"amount": 42.5, "customer_email": "c@example.com"}),
    {"role": "user", "content": "Now do step 2 of 5: Check refund eligibility"},
]


def request(messages: list | None = None, *, planning: bool = False) -> ModelRequest:
    return ModelRequest(
        agent="refund",
        task_id=1,
        step=1,
        step_title="Check",
        attempt=1,
        messages=messages or HISTORY,
        tools=[{"name": "lookup_order", "description": "", "parameters": {"type": "object"}}],
        task_input={},
        planning=planning,
    )


def test_a_tool_call_reply_is_parsed_with_its_id_and_usage_and_the_history_is_accepted(strict):
    response = OpenAICompatibleModel().complete(request())

    assert [c["name"] for c in response.tool_calls] == ["lookup_order"]
    assert response.tool_calls[0]["arguments"] == {"order_id": "A1001"}
    assert response.tool_calls[0]["id"].startswith("call_")
    assert response.usage["prompt_tokens"] > 0 and response.usage["completion_tokens"] > 0
    sent = strict.received[0]
    assert sent["model"] == "small-model"
    assistant, tool = sent["messages"][2], sent["messages"][3]
    assert assistant["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id":"A1"}'},
    }
    assert tool == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"amount": 42.5, "customer_email": "c@example.com"}',
    }
    assert sent["tools"][0] == {"type": "function", "function": request().tools[0]}
    assert strict.refused == []


def test_a_completion_is_parsed_once_and_not_written_out_again(strict, monkeypatch):
    from agentops.engine import model

    parsed: list[str] = []
    json_parsed = model.json_parsed

    def counted(text: str):
        parsed.append(text)
        return json_parsed(text)

    monkeypatch.setattr(model, "json_parsed", counted)
    strict.brain = lambda body: {
        "content": '{"confidence": 0.5}',
        **tool_call("lookup_order", {"order_id": "A1001"}),
    }

    response = OpenAICompatibleModel().complete(request())

    assert response.tool_calls[0]["arguments"] == {"order_id": "A1001"}
    assert response.confidence == 0.5
    # The call's arguments and the JSON content, each once; no reply text written and reparsed.
    assert parsed == ['{"order_id": "A1001"}', '{"confidence": 0.5}']


def _raw_call(arguments: str) -> dict:
    return {
        "id": "call_raw",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": arguments},
    }


@pytest.mark.parametrize(
    "reply",
    [
        {"tool_calls": [_raw_call("[1]")]},
        {"tool_calls": [_raw_call("null")]},
        {"tool_calls": [_raw_call("{not json")]},
        {"tool_calls": [_raw_call("[" * 100_000 + "]" * 100_000)]},
        {"content": '{"confidence": 3}', **tool_call("lookup_order", {"order_id": "A1"})},
        {"content": '{"plan": []}'},
        {"tool_calls": [_raw_call("{}"), {**_raw_call("{}"), "id": "call_two"}]},
    ],
)
def test_a_malformed_completion_is_output_invalid(strict, monkeypatch, reply):
    from agentops.engine import model

    # The adapter checks the reply as it parsed it: the text path is not taken.
    monkeypatch.setattr(model, "parse_response", lambda *a, **k: pytest.fail("written out"))
    strict.brain = lambda body: reply

    with pytest.raises(ModelFailure) as failure:
        OpenAICompatibleModel().complete(request())

    assert failure.value.kind == "output_invalid"


@hypothesis.settings(
    max_examples=40, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(with_unstorable_parts(json_objects, kinds=ON_THE_WIRE))
def test_a_completion_with_an_unstorable_part_is_output_invalid_naming_its_path(strict, case):
    """What a server can put in JSON text: lone surrogates and NUL escaped (\\ud800, \\u0000),
    NaN and Infinity, keys equal in NFC, deep nesting."""
    arguments, paths = case
    strict.brain = lambda body: tool_call("lookup_order", arguments)

    with pytest.raises(ModelFailure) as failure:
        OpenAICompatibleModel().complete(request())

    assert failure.value.kind == "output_invalid"
    says = str(failure.value)
    prefix = "the model's reply cannot be stored: reply.tool_calls[0].arguments"
    assert any(f"{prefix}{path}" in says for path in paths), says


def test_a_completion_whose_text_or_body_cannot_be_stored_or_read_is_output_invalid(strict):
    deep = "[" * 100_000 + "]" * 100_000
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "small-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "caf\ud800"},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
    }
    text = json.dumps(completion)
    strict.faults = [
        (200, {"Content-Type": "application/json"}, text),
        (
            200,
            {"Content-Type": "application/json"},
            text.replace('"logprobs"', f'"x": {deep}, "logprobs"'),
        ),
    ]

    with pytest.raises(ModelFailure) as surrogate:
        OpenAICompatibleModel().complete(request())
    with pytest.raises(ModelFailure) as nested:
        OpenAICompatibleModel().complete(request())

    assert surrogate.value.kind == nested.value.kind == "output_invalid"
    assert str(surrogate.value) == (
        "the model's reply cannot be stored: reply.text: contains a lone surrogate (\\ud800), "
        "which cannot be stored"
    )
    assert str(nested.value) == "the model server's answer is nested too deeply to read"


@pytest.mark.django_db(transaction=True)
def test_a_reply_with_a_lone_surrogate_stops_the_task_with_its_path_on_the_recovery_panel(
    strict, settings, redis_clean, django_user_model
):
    from django.test import Client
    from django.urls import reverse

    settings.AGENTOPS = {**settings.AGENTOPS, "MODEL_ADAPTER": "openai"}
    # As a real server sends it: the arguments' JSON text escapes the surrogate (\ud800).
    strict.brain = lambda body: tool_call("lookup_order", {"order_id": "A1", "note": "\ud800"})

    task = run_until_parked_or_done(
        task_create(agent="test_unstorable", goal="look", step_retry_cap=2)
    )

    assert_stopped_by_the_reply(task, paths=[".tool_calls[0].arguments.note"], attempts=2)
    assert len(strict.received) == 2
    admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("reviews:recover", args=[task.pk])).content.decode()
    assert "reply.tool_calls[0].arguments.note: contains a lone surrogate" in page


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"name": "a", "arguments": {}}],
                },
            ],
            "id",
        ),
        ([{"role": "user", "content": "x"}, {"role": "tool", "content": "{}"}], "tool_call_id"),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "nope", "content": "{}"},
            ],
            "answers no earlier call",
        ),
        (
            [
                {"role": "user", "content": "x"},
                assistant_message("", [{"id": "c1", "name": "a", "arguments": {}}]),
                {"role": "user", "content": "next"},
            ],
            "must be followed by tool messages",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "c", "content": {"a": 1}},
            ],
            "",
        ),
        ([{"role": "user", "content": "x", "tool_calls": []}], "unknown fields"),
    ],
    ids=["bare-call", "no-tool-call-id", "unknown-id", "unanswered", "dict-content", "extra-field"],
)
def test_the_strict_server_refuses_what_a_real_server_refuses(messages, says):
    with pytest.raises(Refused) as refused:
        check_request({"model": "m", "messages": messages})
    assert says in str(refused.value)


def test_the_strict_server_refuses_unknown_parameters():
    with pytest.raises(Refused, match="Unrecognized request argument"):
        check_request({"model": "m", "messages": [{"role": "user", "content": "x"}], "foo": 1})


def test_json_content_carries_confidence_and_plans(strict):
    strict.brain = lambda body: {"content": '{"plan": [{"title": "Look"}], "confidence": 0.8}'}

    response = OpenAICompatibleModel().complete(request(planning=True))

    assert response.plan == [{"title": "Look"}] and response.confidence == 0.8
    assert strict.received[0]["response_format"] == {"type": "json_object"}


def http_date(seconds: float) -> str:
    return format_datetime(datetime.now(UTC) + timedelta(seconds=seconds), usegmt=True)


ERROR = json.dumps({"error": {"message": "x", "type": "x", "param": None, "code": None}})


@pytest.mark.parametrize(
    ("status", "headers", "body", "kind", "retryable"),
    [
        (429, {"Retry-After": "7"}, ERROR, "rate_limited", True),
        (429, {"Retry-After": "later"}, ERROR, "rate_limited", True),
        (503, {}, ERROR, "unavailable", True),
        (500, {}, "oops", "unavailable", True),
        (
            400,
            {},
            json.dumps(
                {
                    "error": {
                        "message": "too long",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                }
            ),
            "context_overflow",
            True,
        ),
        (401, {}, ERROR, "bad_request", False),
        (404, {}, ERROR, "bad_request", False),
        (200, {"Content-Type": "application/json"}, "not json", "output_invalid", True),
        (200, {"Content-Type": "application/json"}, '{"choices": []}', "output_invalid", True),
        (
            200,
            {"Content-Type": "application/json"},
            json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "tool_calls",
                            "message": {
                                "role": "assistant",
                                "content": None,
                                "tool_calls": [
                                    {
                                        "id": "c",
                                        "type": "function",
                                        "function": {"name": "x", "arguments": "{"},
                                    }
                                ],
                            },
                        }
                    ],
                }
            ),
            "output_invalid",
            True,
        ),
    ],
    ids=[
        "429",
        "429-garbage-hint",
        "503",
        "500",
        "context",
        "401",
        "404",
        "not-json",
        "no-choices",
        "broken-arguments",
    ],
)
def test_sdk_errors_map_onto_failure_kinds(strict, status, headers, body, kind, retryable):
    strict.faults.append((status, headers, body))

    with pytest.raises(ModelFailure) as failure:
        OpenAICompatibleModel().complete(request())

    assert failure.value.kind == kind
    assert failure.value.retryable is retryable
    assert len(strict.faults) == 0  # one request: the SDK does not retry (max_retries=0)


def test_retry_after_as_an_http_date_is_a_wait_not_a_crash(strict):
    dated = time.monotonic()
    strict.faults.append((429, {"Retry-After": http_date(30)}, ERROR))

    with pytest.raises(ModelFailure) as failure:
        OpenAICompatibleModel().complete(request())
    elapsed = time.monotonic() - dated

    assert failure.value.kind == "rate_limited"
    # The date is 30 s ahead when written, whole seconds; the wait is what is left of it when the
    # answer is read (seconds later on a loaded machine).
    assert 30 - elapsed - 1 <= failure.value.retry_after <= 31


def test_retry_after_hints_in_every_form():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert retry_after_seconds({"Retry-After": "7"}, now=now) == 7.0
    assert retry_after_seconds({"retry-after": date}, now=now) == 90.0
    assert retry_after_seconds({"retry-after-ms": "1500"}, now=now) == 1.5
    assert retry_after_seconds({"Retry-After": "soon"}, now=now) is None
    assert (
        retry_after_seconds(
            {"Retry-After": format_datetime(now, usegmt=True)}, now=now + timedelta(seconds=9)
        )
        == 0.0
    )
    assert retry_after_seconds({}, now=now) is None


def test_a_slow_server_is_a_timeout(strict):
    def slow(body: dict) -> dict:
        time.sleep(1.5)
        return {"content": "late"}

    strict.brain = slow
    with pytest.raises(ModelFailure) as failure:
        OpenAICompatibleModel().complete(request())
    assert failure.value.kind == "timeout"


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
        '{"tool_calls": [{"id": 5, "name": "a"}]}',
        '{"confidence": 3}',
        '{"plan": []}',
        "[1, 2]",
    ],
)
def test_malformed_model_output_is_output_invalid(raw):
    with pytest.raises(ModelFailure) as failure:
        parse_response(raw, usage={})
    assert failure.value.kind == "output_invalid"


# -- model check ---------------------------------------------------------------------------------


def test_model_check_against_the_strict_server_is_ok(strict, settings, capsys):
    settings.AGENTOPS = {**settings.AGENTOPS, "MODEL_ADAPTER": "openai"}
    strict.brain = preflight_brain

    call_command("model", "check", "--json")

    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True, report
    assert report["tool_calling"] and report["tool_history"] and report["json_output"]
    assert report["server"] == strict.url and report["model"] == "small-model"
    assert report["calls"] == 3 and len(report["latency_ms"]) == 3
    assert report["prompt_tokens"] > 0 and report["completion_tokens"] > 0
    # Two tool round trips: the last request carries both results, answering their ids.
    last = strict.received[-1]["messages"]
    assert [m["role"] for m in last].count("tool") == 2
    assert strict.refused == []


def test_model_check_against_a_server_that_refuses_tool_messages_fails(strict, settings, capsys):
    settings.AGENTOPS = {**settings.AGENTOPS, "MODEL_ADAPTER": "openai"}
    strict.brain = preflight_brain
    strict.reject_tool_messages = True

    with pytest.raises(CommandError) as failed:
        call_command("model", "check", "--json")

    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["tool_calling"] and not report["tool_history"]
    assert "sending the tool results back failed" in str(failed.value)
    assert "role 'tool' is not supported" in str(failed.value)


def test_model_check_reports_json_output_nested_too_deeply_instead_of_crashing(strict, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "MODEL_ADAPTER": "openai"}

    def deep_json(body: dict) -> dict:
        if (body.get("response_format") or {}).get("type") == "json_object":
            return {"content": "[" * 100_000 + "]" * 100_000}
        return preflight_brain(body)

    strict.brain = deep_json

    with pytest.raises(CommandError, match="asked for a JSON object, the model replied"):
        call_command("model", "check")


def test_model_check_names_a_model_without_tool_calling(strict, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "MODEL_ADAPTER": "openai"}
    strict.brain = lambda body: {"content": "The sum is 5."}

    with pytest.raises(CommandError, match="answered without calling the offered tool"):
        call_command("model", "check")


def test_model_check_of_an_unreachable_server_exits_non_zero(settings):
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "MODEL_ADAPTER": "openai",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    }
    with pytest.raises(CommandError, match="is the server running"):
        call_command("model", "check", "--agent", "refund")


def test_model_check_of_the_scripted_model_is_ok(capsys):
    call_command("model", "check", "--json")

    assert json.loads(capsys.readouterr().out)["server"] == "scripted (offline)"


def test_a_tool_service_retry_after_as_an_http_date_is_a_wait_not_a_crash():
    import httpx

    from agentops.engine.errors import ToolFailure
    from agentops.sdk import http_answer

    dated = time.monotonic()
    response = httpx.Response(429, headers={"Retry-After": http_date(20)})

    with pytest.raises(ToolFailure) as failure:
        http_answer(response, name="payments.refund", expect=("refund_id",))
    elapsed = time.monotonic() - dated

    assert failure.value.kind == "rate_limited"
    assert 20 - elapsed - 1 <= failure.value.retry_after <= 21  # as above


def test_a_worker_starts_without_importing_the_openai_sdk():
    # The SDK is about half of a process's start-up; workers on the scripted model never use it.
    code = (
        "import django, sys; django.setup(); "
        "import agentops.management.commands.worker, agentops.management.commands.sweeper, "
        "agentops.jobs; print('openai' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentops.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
