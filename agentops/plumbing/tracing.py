"""OpenTelemetry traces: one trace per task, named after the GenAI semantic conventions.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; then
every process (web, workers, sweeper) exports its spans over OTLP/HTTP in the background, and the
SDK reads the other standard variables itself (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`,
`OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_SCHEDULE_DELAY`, ...). Off, no tracer provider is
set, the web tier is not instrumented and each helper here is one test of a flag.

A task's trace:

    POST /api/v1/tasks            the request that started it (`agentops.task.create` if none did)
    └ invoke_agent refund         one per worker slice; a slice after a crash hangs here too
      ├ chat gpt-4o               the model call for the plan (an agent without a fixed one)
      └ agentops.step 3           one per step the slice runs
        ├ chat gpt-4o             the model call: request model, tokens in and out
        └ execute_tool refund     the tool call: side effect, lane, idempotency key

The task keeps the context its trace hangs from (`Task.trace_context`, a W3C `traceparent`), so
every slice of it belongs to one trace whichever worker runs it. A job's meta carries the
`traceparent` of whatever enqueued it: the request that decided a gate, say, to which the slice
that resumes links. A gate's wait is two span events: `agentops.gate.opened` on the step that
parked and `agentops.gate.decided` on the slice that resumes after the decision.

A call or step that failed says so on its span, as the conventions' "Recording errors" asks: an
error status whose description is the failure's message, and `error.type`, a low-cardinality
class of the failure (`error_type`): for a failure the engine classified, its kind (`timeout`,
`rate_limited`, `unavailable`, ... the one list of `engine.errors.FailureKind`, also on the span
as `agentops.failure.kind`); for an exception nothing classified (a tool's bug, an error escaping
a span), its class's fully qualified name. Nothing is recorded as an exception event, which the
conventions no longer recommend. A span that ended well has neither.

Every attribute is redacted (`engine.redaction`) on its way out, the web tier's included.
Spans leave in the background (a batch every `OTEL_BSP_SCHEDULE_DELAY` ms, each export with the
exporter's deadline): a collector that is slow or down never holds a step; a worker killed with
SIGKILL loses the spans it had not sent yet, and the next slice of its task goes on in the trace.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, Tracer

    from agentops.models import Step, Task, ToolCall

TRACEPARENT = "traceparent"
# A span's status description quotes the failure's message, up to this many characters.
DESCRIPTION_LIMIT = 500
# URLs the web tier does not trace: probes and scrapes, every few seconds, say nothing of a task;
# and the pages whose URL is a credential (an email's action link, a Slack account link), which
# redaction cannot tell from any other path.
EXCLUDED_URLS = "healthz,readyz,metrics,static/,email-actions/,slack/link/"

# Set by `configure`; None while tracing is off (this module then imports nothing of
# OpenTelemetry).
_tracer: Tracer | None = None


def enabled() -> bool:
    return _tracer is not None


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Export spans when an OTLP endpoint is configured, and trace the web tier; True when on.

    Called once per process as Django starts (`AgentopsConfig.ready`), before the request
    handler loads its middleware (the Django instrumentation adds one)."""
    global _tracer
    if _tracer is not None:
        return True
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from agentops.plumbing.otlp import RedactingExporter

    provider = TracerProvider(
        resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "agentops")})
    )
    provider.add_span_processor(BatchSpanProcessor(RedactingExporter(OTLPSpanExporter())))
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument(
        excluded_urls=environ.get("OTEL_PYTHON_DJANGO_EXCLUDED_URLS", EXCLUDED_URLS)
    )
    _tracer = trace.get_tracer("agentops")
    return True


# -- the trace context a task and a job carry ------------------------------------------------


def current_traceparent() -> str:
    """The W3C `traceparent` of the current span ("" when there is none, or tracing is off)."""
    if _tracer is None:
        return ""
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get(TRACEPARENT, "")


def task_trace_context(parent: Task | None) -> str:
    """The context a new task's trace hangs from: its parent task's (a fan-out child is part of
    its parent's trace), the current request's, or a span of its own creation."""
    if _tracer is None:
        return ""
    from opentelemetry import trace

    if parent is not None and parent.trace_context:
        return parent.trace_context
    if trace.get_current_span().get_span_context().is_valid:
        return current_traceparent()
    with _tracer.start_as_current_span("agentops.task.create"):
        return current_traceparent()


def job_meta() -> dict[str, str]:
    """What a job enqueued now carries of the trace: the enqueuer's `traceparent`, if any."""
    traceparent = current_traceparent()
    return {TRACEPARENT: traceparent} if traceparent else {}


def _span_context(traceparent: object) -> SpanContext | None:
    from opentelemetry import trace
    from opentelemetry.propagate import extract

    if not isinstance(traceparent, str) or not traceparent:
        return None
    context = extract({TRACEPARENT: traceparent})
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def _task_parent(task: Task) -> Context:
    """The context a slice of `task` starts in: its stored one, or, for a task created while
    tracing was off, one made from its id (every slice of it still shares one trace)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    span_context = _span_context(task.trace_context)
    if span_context is None:
        seed = hashlib.sha256(f"agentops-task:{task.pk}:{task.created_at}".encode()).digest()
        span_context = SpanContext(
            trace_id=int.from_bytes(seed[:16]),
            span_id=int.from_bytes(seed[16:24]),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


# -- failures on spans ---------------------------------------------------------------------------


@runtime_checkable
class Classified(Protocol):
    """A failure that names its own class for traces: the engine's step failures (its kind,
    or the class of the exception a tool's bug raised: `StepFailure.error_type`)."""

    @property
    def kind(self) -> str: ...

    @property
    def error_type(self) -> str: ...


def qualified_name(cls: type) -> str:
    """A class's name as Python's tracebacks print it: `package.module.Name`, bare for the
    built-in exceptions (`KeyError`)."""
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def error_type(error: BaseException) -> str:
    """The `error.type` of `error`: what a classified failure names, else its class."""
    return error.error_type if isinstance(error, Classified) else qualified_name(type(error))


def error_record(span: Span | None, error: BaseException) -> None:
    """Mark `span` failed by `error`: an error status described by its message, `error.type`,
    and the engine's failure kind when it has one."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    from agentops.engine.redaction import redacted

    span.set_attribute("error.type", error_type(error))
    if isinstance(error, Classified):
        span.set_attribute("agentops.failure.kind", str(error.kind))
    # Redacted before it is cut short: a secret cut in two would not be recognised after.
    span.set_status(Status(StatusCode.ERROR, redacted(str(error))[:DESCRIPTION_LIMIT]))


# -- spans of the engine ------------------------------------------------------------------------

# A block in a span, or, with tracing off, in nothing (one shared object: no cost per step).
SpanBlock = AbstractContextManager["Span | None"]
_OFF: SpanBlock = nullcontext(None)


@contextmanager
def _span(name: str, **options: Any) -> Iterator[Span]:
    """A current span that records an exception escaping it with `error_record` (instead of
    the SDK's exception event and `Type: message` status). Like the SDK, only an Exception
    counts: a signal deriving from BaseException (a lost lease, a shutdown) is not a failure."""
    assert _tracer is not None
    with _tracer.start_as_current_span(
        name, record_exception=False, set_status_on_exception=False, **options
    ) as span:
        try:
            yield span
        except Exception as error:
            error_record(span, error)
            raise


def slice_span(task: Task, *, enqueued_by: object = None) -> SpanBlock:
    """The span of one worker slice of `task`, linked to the context that enqueued its job
    (`enqueued_by`, a traceparent) when that is not the task's own trace."""
    if _tracer is None:
        return _OFF
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind

    parent = _task_parent(task)
    links = []
    enqueuer = _span_context(enqueued_by)
    own = trace.get_current_span(parent).get_span_context()
    if enqueuer is not None and enqueuer.trace_id != own.trace_id:
        links.append(Link(enqueuer, {"agentops.link": "enqueued_by"}))
    return _span(
        f"invoke_agent {task.agent}",
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": task.agent,
            "agentops.task.id": task.pk,
            "agentops.task.claims": task.claims,
            "agentops.task.recoveries": task.recoveries,
        },
    )


def slice_outcome(span: Span | None, outcome: str) -> None:
    if span is not None:
        span.set_attribute("agentops.slice.outcome", outcome)


def step_span(step: Step) -> SpanBlock:
    """One try of a step; `step_outcome` marks it failed when the try failed."""
    if _tracer is None:
        return _OFF
    return _span(
        f"agentops.step {step.ordinal}",
        attributes={
            "agentops.step.ordinal": step.ordinal,
            "agentops.step.title": step.title,
            "agentops.step.attempt": step.attempts,
        },
    )


def step_outcome(span: Span | None, failure: BaseException | None) -> None:
    if failure is not None:
        error_record(span, failure)


def model_span(model: str, provider: str) -> SpanBlock:
    """A model call: `usage_record` adds what the provider counted once it answered; a failure
    the call raises marks the span failed."""
    if _tracer is None:
        return _OFF
    from opentelemetry.trace import SpanKind

    return _span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        },
    )


def usage_record(span: Span | None, usage: Mapping[str, Any]) -> None:
    if span is None:
        return
    span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens") or 0))
    span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("completion_tokens") or 0))


def tool_span(call: ToolCall, *, lane: str, how: str) -> SpanBlock:
    """A tool call through the ledger in its step's `lane` (the route the policy gave it):
    `how` says whether it runs now (`invoke`) or is reconciled after an earlier holder left
    it pending (`reconcile`)."""
    if _tracer is None:
        return _OFF
    from opentelemetry.trace import SpanKind

    return _span(
        f"execute_tool {call.tool}",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool,
            "agentops.tool.side_effect": call.side_effect,
            "agentops.lane": str(lane),
            "agentops.idempotency_key": call.idempotency_key,
            "agentops.ledger.how": how,
        },
    )


def tool_outcome(span: Span | None, status: str, failure: BaseException | None = None) -> None:
    """The ledger row's status after the call, and its failure if the step cannot go on with
    it (a failed call, one whose effect is unknown, an output that was rejected)."""
    if span is None:
        return
    span.set_attribute("agentops.ledger.status", status)
    if failure is not None:
        error_record(span, failure)


def event_add(name: str, attributes: Mapping[str, str | int] | None = None) -> None:
    """An event on the current span (a gate opened, a gate decided)."""
    if _tracer is not None:
        from opentelemetry import trace

        trace.get_current_span().add_event(name, dict(attributes or {}))
