"""Structured log lines: time, level, logger and message on every line, plus their context.

`AGENTOPS_LOG_FORMAT` chooses `kv` (key=value, for people) or `json` (one object a line, for a
log pipeline). While a worker advances a task, `task_context()` tags every line with the task id
and step; a throttle lockout line carries its scope, client address and (for a username) the
username. While the web answers a request, `request_context()` tags every line with the request
id, method and path (and the user, on errors); a job the request enqueued carries the request id
in its meta (`job_meta()`), and the worker tags the job's lines with it (`job_request_context()`).
Expected refusals (403) are logged as one line: their traceback says nothing new.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied
from django.utils.functional import LazyObject, empty

if TYPE_CHECKING:
    # Only for types: gunicorn's master imports this module for its log formatter, and
    # django.http brings in django.db, whose connection handler must be made in the worker,
    # after gevent patched the thread-locals it keeps connections in.
    from django.http import HttpRequest

# The key of the request id in an RQ job's meta (the job's arguments stay ids of rows).
JOB_META_REQUEST_ID = "request_id"

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


_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentops_request_id", default=None
)
_request: contextvars.ContextVar[HttpRequest | None] = contextvars.ContextVar(
    "agentops_request", default=None
)


@contextmanager
def request_context(
    *, request_id: str | None, request: HttpRequest | None = None
) -> Iterator[None]:
    """Tag log lines written inside the block with `request_id` (and the request's method, path
    and, on errors, user)."""
    id_token = _request_id.set(request_id)
    request_token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(request_token)
        _request_id.reset(id_token)


def current_request_id() -> str | None:
    return _request_id.get()


def job_meta() -> dict[str, str]:
    """The meta of a job enqueued now: the current request id, if any (a job a worker enqueues
    while running a job keeps the id of the request that started the work)."""
    request_id = _request_id.get()
    return {JOB_META_REQUEST_ID: request_id} if request_id else {}


@contextmanager
def job_request_context() -> Iterator[None]:
    """While an RQ job runs: tag its lines with the id of the request that enqueued it."""
    from rq import get_current_job

    job = get_current_job()
    request_id = job.meta.get(JOB_META_REQUEST_ID) if job is not None else None
    with request_context(request_id=request_id if isinstance(request_id, str) else None):
        yield


def request_user_label(request: HttpRequest, *, look_up: bool) -> str | None:
    """Who made `request`: the username, `anonymous`, or None when unknown.

    The user is looked up (a session and a user query) only when `look_up` is set and nothing
    has looked it up yet; a database that fails then is the error being logged, not a new one.
    """
    from django.db import DatabaseError  # in the worker (see the imports above)

    user = getattr(request, "user", None)
    if user is None:
        return None  # the request failed before the authentication middleware
    # A lazy user nobody has looked at yet: LazyObject keeps the `empty` marker until then.
    if isinstance(user, LazyObject) and getattr(user, "_wrapped", None) is empty and not look_up:
        return None
    try:
        if not user.is_authenticated:
            return "anonymous"
        return str(user.get_username())
    except DatabaseError:
        return "unknown (database error)"


class ContextFilter(logging.Filter):
    """Adds the task context and the request context (id, method, path, user) to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields: dict[str, Any] = dict(_task.get() or {})
        request = getattr(record, "request", None)  # django.request's records carry it
        if getattr(request, "META", None) is None:
            request = _request.get()
        request_id = _request_id.get()
        if request is not None:
            request_id = getattr(request, "request_id", None) or request_id
            fields["method"] = request.method
            fields["path"] = request.path
            # Only for a crash: it is logged where it happened, inside the request's database
            # slot (agentops.plumbing.slots), and the lookup is worth its query there.
            crash = record.exc_info is not None and record.levelno >= logging.ERROR
            fields["user"] = request_user_label(request, look_up=crash)
        fields["request_id"] = request_id
        for key, value in fields.items():
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


# Fields a record may carry (`extra=`): the request and task context, a response's status, the
# throttle's lockout lines, and an outage of PostgreSQL or Redis as a worker or the sweeper rides
# it out (agentops.plumbing.outages).
_CONTEXT_KEYS = (
    "request_id",
    "method",
    "path",
    "user",
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
        return " ".join(f"{key}={kv_value(value)}" for key, value in fields.items())


def kv_value(value: Any) -> str:
    """`value` as a kv field value: bare when it can be, else JSON-quoted."""
    text = str(value)
    if text and not any(ch in text for ch in ' "=\n\t'):
        return text
    return json.dumps(text)
