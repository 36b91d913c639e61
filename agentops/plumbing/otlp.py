"""The OTLP export of `agentops.plumbing.tracing`: every span leaves with its attributes redacted.

Imported only once tracing is on (it loads the OpenTelemetry SDK).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status

from agentops.engine.redaction import REDACTED, is_secret_key, redacted


def _redacted_value(value: Any) -> Any:
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return tuple(redacted(item) if isinstance(item, str) else item for item in value)
    return value


def attributes_redacted(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Span, event and link attributes with secrets replaced: under a secret-looking key
    (`http.request.header.authorization`) and inside any text."""
    return {
        key: REDACTED if is_secret_key(key) and value not in (None, "") else _redacted_value(value)
        for key, value in (attributes or {}).items()
    }


def span_redacted(span: ReadableSpan) -> ReadableSpan:
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes_redacted(span.attributes),
        events=[Event(e.name, attributes_redacted(e.attributes), e.timestamp) for e in span.events],
        links=[Link(link.context, attributes_redacted(link.attributes)) for link in span.links],
        kind=span.kind,
        status=Status(span.status.status_code, redacted(span.status.description))
        if span.status.description
        else span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingExporter(SpanExporter):
    """Wraps the OTLP exporter: every span leaves with its attributes redacted."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([span_redacted(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
