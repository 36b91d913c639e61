"""OpenTelemetry traces: one trace per task, received by a real OTLP/HTTP receiver.

The receiver below decodes what the processes send with `opentelemetry-proto` (protobuf over
HTTP, as an OpenTelemetry Collector takes it) and refuses any other request. The web tier runs
as its own process, the worker is SIGKILLed half-way and another takes over: the spans of every
process must make one tree per task. Failures show on the spans of the calls and steps that
failed (`error.type` and an error status), checked against what the task's record says of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentops.dev.sim.models import Effect, Fault, FaultMode
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create
from agentops.models import Event, Gate, Step, Task, ToolCall
from agentops.plumbing import tracing
from agentops.plumbing.otlp import RedactingExporter
from agentops.states import GateStatus, LedgerStatus, TaskStatus
from agentops.tokens import api_token_create
from tests.agentops import traced_agent
from tests.conftest import ROOT, free_port, wait_for
from tests.reviews.conftest import ensure_groups, make_user
from tests.secret_corpus import TEXT_FORMS
from tests.serving import serve_in_thread
from tests.strict_openai import StrictServer, refund_brain, serve

REFUND_STEP = 3
EMAIL_STEP = 4
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
DECISION_TRACE = "0af7651916cd43dd8448eb211c80319c"
DECISION_SPAN = "b7ad6b7169203331"


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class Received:
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str, dict[str, Any]]]
    status: tuple[int, str] = (Status.STATUS_CODE_UNSET, "")
    start: int = 0


@dataclass
class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf in and out, nothing else."""

    spans: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = _attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Received(
                            service=service,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            events=[(e.name, _attributes(e.attributes)) for e in span.events],
                            links=[
                                (
                                    link.trace_id.hex(),
                                    link.span_id.hex(),
                                    _attributes(link.attributes),
                                )
                                for link in span.links
                            ],
                            status=(span.status.code, span.status.message),
                            start=span.start_time_unix_nano,
                        )
                    )

    def named(self, name: str) -> list[Received]:
        """The spans called `name`, in the order they started."""
        return sorted((s for s in list(self.spans) if s.name == name), key=lambda s: s.start)

    def steps(self) -> list[Received]:
        """The step spans, in the order they started."""
        return sorted(
            (s for s in list(self.spans) if s.name.startswith("agentops.step ")),
            key=lambda s: s.start,
        )


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                return self._refuse(404, f"POST {self.path}")
            if self.headers.get("Content-Type") != "application/x-protobuf":
                return self._refuse(415, f"Content-Type {self.headers.get('Content-Type')}")
            try:
                received.take(body)
            except DecodeError as exc:  # a body that is not the protobuf message
                return self._refuse(400, f"undecodable body: {exc}")
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_GET(self) -> None:
            self._refuse(405, f"GET {self.path}")

        def _refuse(self, status: int, why: str) -> None:
            received.refused.append(why)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    yield received, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def otel_env(endpoint: str, service: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        # One step a slice: each slice's spans leave before the next slice starts.
        "AGENTOPS_SLICE_SECONDS": "0",
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.crash
def test_a_gated_refund_across_a_worker_sigkill_is_one_trace(
    processes, receiver, django_user_model
):
    received, endpoint = receiver
    ensure_groups()
    starter = make_user(django_user_model, "stan", "operators", "task starters")
    approver = make_user(django_user_model, "olga", "operators")
    starter_token = api_token_create(user=starter, name="t")[1]
    approver_token = api_token_create(user=approver, name="t")[1]
    port = free_port()
    processes.start(
        "runserver",
        f"127.0.0.1:{port}",
        "--noreload",
        "--skip-checks",
        extra_env=otel_env(endpoint, "agentops-web"),
        name="web",
    )
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{base}/healthz"), timeout=30, message="the web process to start")
    worker_env = otel_env(endpoint, "agentops-worker")

    started = httpx.post(
        f"{base}/api/v1/tasks",
        json={"agent": "refund", "goal": "Refund order B2002", "input": {"order_id": "B2002"}},
        headers={
            "Authorization": f"Bearer {starter_token}",
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        },
        timeout=30,
    )
    assert started.status_code == 201, started.text
    task = Task.objects.get(pk=started.json()["id"])
    secret = TEXT_FORMS["stripe-sk-live"][1]
    looked = httpx.get(
        f"{base}/api/v1/tasks/{task.pk}?note={secret}",
        headers={"Authorization": f"Bearer {starter_token}"},
        timeout=30,
    )
    assert looked.status_code == 200
    # The email answers after 15 s (the first worker waits 20): a window to kill it mid-call.
    Fault.objects.create(service="email", operation="send", mode=FaultMode.SLOW, delay_seconds=15.0)
    victim = processes.worker(extra_env={**worker_env, "AGENTOPS_TOOL_TIMEOUT_SECONDS": "20"})
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.AWAITING_APPROVAL,
        timeout=60,
        message="the refund to wait at its gate",
    )
    gate = Gate.objects.get(task=task, status=GateStatus.OPEN)
    approve = httpx.post(
        f"{base}/api/v1/gates/{gate.pk}/approve",
        json={"seen_digest": gate.args_digest},
        headers={
            "Authorization": f"Bearer {approver_token}",
            "traceparent": f"00-{DECISION_TRACE}-{DECISION_SPAN}-01",
        },
        timeout=30,
    )
    assert approve.status_code == 200, approve.text
    # The refund's slice has left (the receiver has it: the slice linked to the decision) and
    # the email is in flight: kill.
    wait_for(
        lambda: (
            any(s.links for s in received.named("invoke_agent refund"))
            and Effect.objects.filter(service="email").exists()
        ),
        timeout=60,
        message="the refund's spans to arrive and the email to reach the service",
    )
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    Fault.objects.filter(service="email").update(mode=FaultMode.OK)
    processes.worker(extra_env=worker_env)
    processes.sweeper()
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_terminal,
        timeout=60,
        message="the task to finish after the takeover",
    )
    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    wait_for(
        lambda: any(
            s.attributes.get("agentops.slice.outcome") == "succeeded"
            for s in received.named("invoke_agent refund")
        ),
        timeout=30,
        message="the last slice's span to arrive",
    )
    spans = list(received.spans)

    assert received.refused == []
    # The web request that started the task continued the client's trace ...
    (start_request,) = [
        s
        for s in spans
        if s.service == "agentops-web"
        and s.attributes.get("http.method") == "POST"
        and s.trace_id == CLIENT_TRACE
    ]
    assert start_request.parent_id == CLIENT_SPAN
    assert task.trace_context == f"00-{CLIENT_TRACE}-{start_request.span_id}-01"
    # ... and every span of the task's work is in that trace, under that request.
    slices = received.named("invoke_agent refund")
    assert {s.trace_id for s in slices} == {CLIENT_TRACE}
    assert {s.parent_id for s in slices} == {start_request.span_id}
    assert {s.service for s in slices} == {"agentops-worker"}
    assert all(s.attributes["gen_ai.operation.name"] == "invoke_agent" for s in slices)
    assert all(s.attributes["agentops.task.id"] == task.pk for s in slices)
    by_id = {s.span_id: s for s in spans}
    steps = [s for s in spans if s.name.startswith("agentops.step ")]
    assert steps and all(by_id[s.parent_id] in slices for s in steps)
    # The gate: opened on the step that parked, decided on the slice the decision enqueued,
    # which links to the deciding request (its own trace, continued from the reviewer's client).
    (decision_request,) = [s for s in spans if s.trace_id == DECISION_TRACE]
    assert decision_request.parent_id == DECISION_SPAN
    gated = [s for s in steps if s.attributes["agentops.step.ordinal"] == REFUND_STEP]
    assert [name for s in gated for name, _ in s.events] == [
        "agentops.gate.opened",
        "agentops.gate.decided",
    ]
    parked_slice, approved_slice = (by_id[s.parent_id] for s in gated)
    assert parked_slice.attributes["agentops.slice.outcome"] == "awaiting approval"
    assert approved_slice.links == [
        (DECISION_TRACE, decision_request.span_id, {"agentops.link": "enqueued_by"})
    ]
    # Model calls: one per step, under it. The killed slice's step never ended (nor left), so
    # its model call, if it left before the kill, has no parent here.
    chats = received.named("chat scripted")
    placed = [c for c in chats if c.parent_id in by_id]
    assert all(by_id[c.parent_id] in steps for c in placed)
    asked = sorted(by_id[c.parent_id].attributes["agentops.step.ordinal"] for c in placed)
    assert asked == [0, 1, 2, 3]  # step 4's reply was asked for in the killed slice
    assert len(chats) - len(placed) <= 1
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    # The refund ran once, in the gate's lane, under its ledger key.
    refund_call = ToolCall.objects.get(task=task, tool="issue_refund")
    (refund,) = received.named("execute_tool issue_refund")
    assert by_id[refund.parent_id] in gated
    assert refund.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "issue_refund",
        "agentops.tool.side_effect": "financial",
        "agentops.lane": "gate",
        "agentops.idempotency_key": refund_call.idempotency_key,
        "agentops.ledger.how": "invoke",
        "agentops.ledger.status": "succeeded",
    }
    # The email's first call died with the worker; the slice after the takeover reconciled it.
    (email,) = received.named("execute_tool email_customer")
    assert email.attributes["agentops.ledger.how"] == "reconcile"
    assert by_id[email.parent_id].attributes["agentops.step.ordinal"] == EMAIL_STEP
    resumed = by_id[by_id[email.parent_id].parent_id]
    assert resumed.attributes["agentops.task.recoveries"] == 1
    assert Effect.objects.filter(service="email").count() == 1
    # What the web tier saw of a secret in a URL left redacted.
    (looked_up,) = [s for s in spans if s.attributes.get("http.method") == "GET"]
    assert looked_up.attributes["http.url"].endswith(f"/api/v1/tasks/{task.pk}?note=[redacted]")
    assert secret not in repr([s.attributes for s in spans])


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("form", sorted(TEXT_FORMS))
def test_every_attribute_leaves_redacted(form):
    text, secret = TEXT_FORMS[form]
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingExporter(memory)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("s", attributes={"url.query": f"q={text}"}) as span:
        span.set_attribute("http.request.header.authorization", "Basic dXNlcjpwYXNz")
        span.set_attribute("agentops.notes", [text, "fine"])
        span.add_event("e", {"exception.message": f"boom: {text}"})
    (exported,) = memory.get_finished_spans()

    assert secret not in repr(dict(exported.attributes or {}))
    assert secret not in repr([dict(e.attributes or {}) for e in exported.events])
    assert exported.attributes["http.request.header.authorization"] == "[redacted]"
    assert exported.attributes["agentops.notes"][1] == "fine"


@pytest.mark.parametrize("form", sorted(TEXT_FORMS))
def test_a_failure_s_description_leaves_redacted_where_it_is_cut_short(form):
    text, secret = TEXT_FORMS[form]
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingExporter(memory)))
    tracer = provider.get_tracer("test")
    # A message whose secret straddles the description's length limit.
    pad = "x" * (tracing.DESCRIPTION_LIMIT - text.index(secret) - len(secret) // 2 - 1) + " "
    with tracer.start_as_current_span("s") as span:
        tracing.error_record(span, RuntimeError(f"{pad}{text}"))
    (exported,) = memory.get_finished_spans()

    assert exported.status.status_code == StatusCode.ERROR
    assert exported.attributes["error.type"] == "RuntimeError"
    assert "agentops.failure.kind" not in exported.attributes
    assert secret[: len(secret) // 2] not in exported.status.description


def test_tracing_is_off_without_an_endpoint():
    """No endpoint: no tracer provider, no exporter, no instrumentation of the web tier."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    probe = (
        "import sys, django; django.setup(); from agentops.plumbing import tracing; "
        "from agentops.engine import runner; from opentelemetry import trace; "
        "from django.conf import settings; "
        "print(tracing.enabled(), type(trace.get_tracer_provider()).__name__, "
        "any(m.startswith('opentelemetry.exporter') for m in sys.modules), "
        "any('opentelemetry' in m for m in settings.MIDDLEWARE))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={
            **env,
            "DJANGO_SETTINGS_MODULE": "agentops.settings",
            "DATABASE_URL": "postgres://lint@127.0.0.1/lint",  # named, never reached
            "REDIS_URL": "redis://127.0.0.1:6379/0",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["False", "ProxyTracerProvider", "False", "False"]


# -- failures on spans ------------------------------------------------------------------------

ERROR = Status.STATUS_CODE_ERROR
UNSET = (Status.STATUS_CODE_UNSET, "")


def failed_tries(task: Task) -> dict[tuple[int, int], dict[str, Any]]:
    """The task's record of its failed step tries: (ordinal, attempt) -> the failure."""
    return {
        (event.step_ordinal, event.payload["attempt"]): event.payload["failure"]
        for event in Event.objects.filter(task=task, action="agentops.step.failed")
    }


def assert_steps_as_recorded(spans: list[Received], failures: dict[tuple[int, int], Any]) -> None:
    """Each step span failed exactly when the record says its try failed, with its kind and
    message; the others carry no error."""
    assert spans
    for span in spans:
        key = (span.attributes["agentops.step.ordinal"], span.attributes["agentops.step.attempt"])
        failure = failures.get(key)
        if failure is None:
            assert span.status == UNSET, key
            assert "error.type" not in span.attributes, key
        else:
            assert span.status == (ERROR, failure["message"]), key
            assert span.attributes["error.type"] == failure["kind"], key
            assert span.attributes["agentops.failure.kind"] == failure["kind"], key
    tried = {
        (s.attributes["agentops.step.ordinal"], s.attributes["agentops.step.attempt"])
        for s in spans
    }
    assert set(failures) <= tried


def assert_no_error(spans: list[Received]) -> None:
    """Spans of operations that ended well: no status, no `error.type`, no exception event."""
    assert spans
    for span in spans:
        assert span.status == UNSET, span.name
        assert "error.type" not in span.attributes, span.name
        assert all(name != "exception" for name, _ in span.events), span.name


@pytest.mark.django_db(transaction=True)
def test_a_tool_that_hangs_or_answers_an_error_has_a_failed_span_in_its_lane(processes, receiver):
    received, endpoint = receiver
    # The order lookup hangs past the tool's 1 s deadline once; the eligibility check answers
    # a 5xx once. Each read step fails once, its retry goes on, and the task succeeds.
    fault_set(service="orders", operation="lookup", mode=FaultMode.TIMEOUT_BEFORE, count=1, delay=3)
    fault_set(service="eligibility", operation="check", mode=FaultMode.ERROR_BEFORE, count=1)
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    worker = processes.worker(
        extra_env={
            **otel_env(endpoint, "agentops-worker"),
            "AGENTOPS_TOOL_TIMEOUT_SECONDS": "1",
        }
    )
    processes.sweeper()  # it enqueues each retry when its backoff is over
    with processes.logs_on_failure(worker):
        wait_for(lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=60, message="the task")
        wait_for(
            lambda: any(
                s.attributes["agentops.slice.outcome"] == "succeeded"
                for s in received.named("invoke_agent refund")
            ),
            timeout=30,
            message="the last slice's span to arrive",
        )

    assert Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED
    assert received.refused == []
    failed = {
        call.tool: call for call in ToolCall.objects.filter(task=task, status=LedgerStatus.FAILED)
    }
    assert sorted(failed) == ["check_eligibility", "lookup_order"]
    hung, looked_up = received.named("execute_tool lookup_order")
    assert hung.attributes["error.type"] == "timeout"
    assert hung.attributes["agentops.failure.kind"] == "timeout"
    assert hung.status == (ERROR, failed["lookup_order"].error["message"])
    refused, checked = received.named("execute_tool check_eligibility")
    assert refused.attributes["error.type"] == "unavailable"
    assert refused.status == (ERROR, failed["check_eligibility"].error["message"])
    assert refused.status[1].startswith("eligibility.check answered 5")
    for span in (hung, refused):
        assert span.attributes["agentops.ledger.status"] == "failed"
        assert not [name for name, _ in span.events if name == "exception"]
    (tracked,) = received.named("execute_tool track_shipment")
    (refunded,) = received.named("execute_tool issue_refund")
    (emailed,) = received.named("execute_tool email_customer")
    assert_no_error([looked_up, checked, tracked, refunded, emailed])
    # Every tool span names its step's lane, as the step records it (the reads are `auto`).
    routes = dict(Step.objects.filter(task=task).values_list("ordinal", "route"))
    assert [routes[ordinal] for ordinal in range(3)] == ["auto"] * 3
    by_id = {s.span_id: s for s in received.spans}
    tools = [s for s in received.spans if s.name.startswith("execute_tool ")]
    assert len(tools) == 7
    for span in tools:
        ordinal = by_id[span.parent_id].attributes["agentops.step.ordinal"]
        assert span.attributes["agentops.lane"] == routes[ordinal] != ""
    failures = failed_tries(task)
    assert sorted(failures) == [(0, 1), (1, 1)]
    assert_steps_as_recorded(received.steps(), failures)
    assert_no_error(received.named("chat scripted"))


def traced_worker(processes, endpoint: str) -> subprocess.Popen[bytes]:
    """A worker that knows `traced_agent`'s agents, exporting its spans to `endpoint`."""
    log = open(processes.log_dir / "traced-worker.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.agentops.traced_worker"],
        cwd=ROOT,
        env={**processes.env, **otel_env(endpoint, "agentops-worker")},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    processes.children.append(worker)
    return worker


@pytest.mark.django_db(transaction=True)
def test_a_tool_that_crashes_has_a_failed_span_naming_the_exception(processes, receiver):
    received, endpoint = receiver
    task = task_create(agent="stock-bot", goal="Count SKU-7", input={"sku": "SKU-7"})
    traced_worker(processes, endpoint)
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.NEEDS_ATTENTION,
        timeout=60,
        message="the task to stop on the tool's bug",
    )
    wait_for(lambda: received.steps(), timeout=30, message="the step's span to arrive")

    assert received.refused == []
    call = ToolCall.objects.get(task=task)
    assert call.status == LedgerStatus.FAILED
    (crashed,) = received.named("execute_tool count_stock")
    # The class of what the tool raised, fully qualified; the kind the engine filed it under.
    assert crashed.attributes["error.type"] == (
        f"{traced_agent.__name__}.{traced_agent.StockLedgerCorrupt.__qualname__}"
    )
    assert crashed.attributes["agentops.failure.kind"] == "tool_error"
    assert crashed.status == (ERROR, call.error["message"])
    assert "does not add up" in crashed.status[1]
    assert crashed.attributes["agentops.lane"] == Step.objects.get(task=task).route == "auto"
    assert not [name for name, _ in crashed.events if name == "exception"]
    (step,) = received.steps()
    assert step.attributes["error.type"] == crashed.attributes["error.type"]
    assert step.status == crashed.status
    assert failed_tries(task)[(0, 1)]["message"] == call.error["message"]
    assert_no_error(received.named("chat scripted"))


@pytest.mark.django_db(transaction=True)
def test_a_plan_the_model_fails_to_make_has_a_failed_chat_span(processes, receiver):
    received, endpoint = receiver
    # The first model call for the plan is rate limited; the next claim plans and goes on.
    task = task_create(
        agent="stock-planner",
        goal="How is the stock counted?",
        input={"model_faults": {"-1": ["429"]}},
    )
    traced_worker(processes, endpoint)
    processes.sweeper()
    wait_for(lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=60, message="the task")
    wait_for(
        lambda: any(
            s.attributes["agentops.slice.outcome"] == "succeeded"
            for s in received.named("invoke_agent stock-planner")
        ),
        timeout=30,
        message="the last slice's span to arrive",
    )

    assert Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED
    assert received.refused == []
    (failed,) = Event.objects.filter(task=task, action="agentops.task.failed")
    by_id = {s.span_id: s for s in received.spans}
    # Two model calls for the plan (the first refused), one for its step.
    refused, planned, answered = received.named("chat scripted")
    # The plan's calls hang from their slices (no step exists yet); the step's from its step.
    assert (
        by_id[refused.parent_id].name
        == by_id[planned.parent_id].name
        == "invoke_agent stock-planner"
    )
    assert by_id[answered.parent_id].name == "agentops.step 0"
    assert refused.attributes["error.type"] == failed.payload["failure"]["kind"] == "rate_limited"
    assert refused.status == (ERROR, failed.payload["failure"]["message"])
    assert_no_error([planned, answered, *received.steps()])


@pytest.mark.django_db(transaction=True)
def test_a_model_call_the_provider_refuses_has_a_failed_chat_span(processes, receiver):
    received, endpoint = receiver
    strict = StrictServer(brain=refund_brain)
    httpd, _ = serve(strict)
    try:
        # The provider's first answer is a 429: the step fails once and its retry goes on.
        rate_limited = {"message": "Rate limit reached", "type": "requests", "code": None}
        strict.faults.append(
            (429, {"Retry-After": "1"}, json.dumps({"error": {**rate_limited, "param": None}}))
        )
        task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
        worker = processes.worker(
            extra_env={
                **otel_env(endpoint, "agentops-worker"),
                "AGENTOPS_MODEL_ADAPTER": "openai",
                "OPENAI_BASE_URL": strict.url,
                "OPENAI_API_KEY": "test-key",
                "OPENAI_MODEL": "strict-model",
            }
        )
        processes.sweeper()
        with processes.logs_on_failure(worker):
            wait_for(
                lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=60, message="the task"
            )
            wait_for(
                lambda: any(
                    s.attributes["agentops.slice.outcome"] == "succeeded"
                    for s in received.named("invoke_agent refund")
                ),
                timeout=30,
                message="the last slice's span to arrive",
            )
    finally:
        httpd.shutdown()

    assert Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED
    assert received.refused == []
    failures = failed_tries(task)
    assert list(failures) == [(0, 1)]
    # One model call per step of five, and the refused one.
    refused, *answered = received.named("chat strict-model")
    assert len(answered) == 5
    assert refused.attributes["gen_ai.provider.name"] == "openai"
    assert refused.attributes["error.type"] == failures[(0, 1)]["kind"] == "rate_limited"
    assert refused.status == (ERROR, failures[(0, 1)]["message"])
    assert "429" in refused.status[1]
    assert "gen_ai.usage.input_tokens" not in refused.attributes
    # Recorded as the conventions ask: not as an exception event.
    assert not [name for name, _ in refused.events if name == "exception"]
    assert_no_error(answered)
    assert_steps_as_recorded(received.steps(), failures)
