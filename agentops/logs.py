"""Structured log lines: time, level, logger and message on every line, plus the task context.

`AGENTOPS_LOG_FORMAT` chooses `kv` (key=value, for people) or `json` (one object a line, for a
log pipeline). While a worker advances a task, `task_context()` tags every line with the task id
and step; a throttle lockout line carries its scope, client address and (for a username) the
username. Expected refusals (403) are logged as one line: their traceback says nothing new.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import PermissionDenied

_task: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "agentops_task_log_context", default=None
)


@contextmanager
def task_context(*, task_id: int, step: int | None = None) -> Iterator[None]:
    """Tag log lines written inside the block with `task_id` (and `step`)."""
    token = _task.set({"task_id": task_id, "step": step})
    try:
        yield
    finally:
        _task.reset(token)


def task_context_step(step: int | None) -> None:
    """Move the current task context to `step` (no-op outside `task_context`)."""
    current = _task.get()
    if current is not None:
        current["step"] = step


class TaskContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        context = _task.get()
        if context:
            for key, value in context.items():
                if value is not None and not hasattr(record, key):
                    setattr(record, key, value)
        return True


class RefusalFilter(logging.Filter):
    """A PermissionDenied is an expected refusal: keep the line, drop the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True


# Fields a record may carry (`extra=`): the task context, a response's status, the throttle's
# lockout lines, and an outage of PostgreSQL or Redis as a worker or the sweeper rides it out
# (agentops.outages).
_CONTEXT_KEYS = (
    "task_id",
    "step",
    "status_code",
    "scope",
    "client",
    "username",
    "failures",
    "lockout_seconds",
    "dependency",
    "attempt",
    "down_seconds",
    "retry_in_seconds",
    "error",
)


class StructuredFormatter(logging.Formatter):
    """`style="kv"`: `time=... level=INFO logger=x task_id=3 msg="..."`; `style="json"`."""

    def __init__(self, style: str = "kv") -> None:
        super().__init__()
        self.json = style == "json"

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
        }
        for key in _CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                fields[key] = value
        fields["msg"] = record.getMessage()
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if self.json:
            return json.dumps(fields, default=str)
        return " ".join(f"{key}={_kv_value(value)}" for key, value in fields.items())


def _kv_value(value: Any) -> str:
    text = str(value)
    if text and not any(ch in text for ch in ' "=\n\t'):
        return text
    return json.dumps(text)
