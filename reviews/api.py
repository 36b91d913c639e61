"""The JSON API (`/api/v1/`), for the tools around the product: read tasks, gates, stopped tasks
and the audit queue; decide gates; start tasks.

It is django-ninja over the same selectors and services as the pages, so the same rules hold:
the permissions of `reviews.roles` (asked through `user.has_perm`), a decision needs the digest
the caller saw (409 when it is stale or someone decided first), separation of duties, one entry
in the decision log per decision.
Requests authenticate with a personal bearer token (`Authorization: Bearer ao_...`); the actor
is the token's user. Browser sessions do not authenticate here, so the API needs no CSRF token
and the pages' CSRF rules stay as they are. Bad tokens are counted per client address
(`agentops.throttle`): past the limit every token from that address, good or bad, answers 429
with Retry-After until the lockout ends (checked before the token is looked up, so a guesser
learns nothing more). The OpenAPI description is at `/api/v1/openapi.json`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema, Status
from ninja.errors import HttpError, Throttled
from ninja.security import HttpBearer

from agentops import throttle
from agentops.engine.errors import AgentOpsError, StartRefused
from agentops.models import AuditItem, Gate, Task
from agentops.selectors import tasks_visible_to
from agentops.services import task_create
from agentops.states import AuditStatus, GateStatus, TaskStatus
from agentops.web import AuthenticatedHttpRequest
from reviews.services import (
    GateAlreadyDecided,
    NotAllowed,
    ReviewError,
    gate_approve,
    gate_edit_and_approve,
    gate_reject,
)
from reviews.tokens import api_token_user

if TYPE_CHECKING:
    from django.contrib.auth.models import User

PAGE_LIMIT = 100
READ_REVIEWS = "reviews.read_reviews"


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> User | None:
        client = throttle.client_address(request)
        keys = [throttle.address_key(throttle.Scope.API_ADDRESS, client)]
        if wait := throttle.throttle_wait(keys):
            raise Throttled(wait=wait)
        user = api_token_user(token)
        if user is None:
            if wait := throttle.throttle_fail(keys, client=client):
                raise Throttled(wait=wait)
            return None
        request.user = user
        return user


api = NinjaAPI(
    title="agentops API",
    version="1",
    urls_namespace="api",
    auth=TokenAuth(),
    docs_url="/docs",
)


@api.exception_handler(Throttled)
def throttled(request: HttpRequest, exc: Throttled) -> HttpResponse:
    wait = int(exc.wait or 1)
    response = api.create_response(
        request,
        {
            "detail": "too many bad tokens from this address; try again in "
            f"{wait} second{'s' if wait != 1 else ''}",
            "retry_after": wait,
        },
        status=429,
    )
    response["Retry-After"] = str(wait)
    return response


# -- schemas ------------------------------------------------------------------------------------


class TaskOut(Schema):
    id: int
    agent: str
    goal: str
    status: str
    current_step: int
    step_count: int
    failure: dict[str, Any] | None
    tokens_used: int
    tokens_saved: int
    cost_used: Decimal
    token_budget: int | None
    cost_budget: Decimal | None
    wall_time_budget_seconds: int | None
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_created_by(task: Task) -> str | None:
        return task.created_by.get_username() if task.created_by else None


class TaskIn(Schema):
    agent: str
    goal: str
    input: dict[str, Any] = {}
    token_budget: int | None = None
    cost_budget: Decimal | None = None
    wall_time_budget_seconds: int | None = None


class GateOut(Schema):
    id: int
    task_id: int
    status: str
    tool: str
    arguments: dict[str, Any]
    args_digest: str
    amount: Decimal | None
    confidence: float | None
    rule: str
    reasons: list[Any]
    policy_version_number: int | None
    approver_group: str
    due_at: datetime
    created_at: datetime
    decided_at: datetime | None
    decided_by: str | None
    feedback: str

    @staticmethod
    def resolve_decided_by(gate: Gate) -> str | None:
        return gate.decided_by.get_username() if gate.decided_by else None


class ApproveIn(Schema):
    seen_digest: str
    reason: str = ""


class RejectIn(Schema):
    seen_digest: str
    feedback: str


class EditIn(Schema):
    seen_digest: str
    arguments: dict[str, Any]
    reason: str = ""


class AuditItemOut(Schema):
    id: int
    task_id: int
    agent: str
    tool: str
    route: str
    sampled: bool
    rule: str
    policy_version_number: int | None
    status: str
    note: str
    created_at: datetime


class Error(Schema):
    detail: str


class ThrottledError(Schema):
    """429: too many bad tokens from the caller's address; the Retry-After header says the same."""

    detail: str
    retry_after: int


# Every operation authenticates: no valid token is 401, a locked-out address 429.
AUTH_ERRORS = {401: Error, 429: ThrottledError}


# -- rules --------------------------------------------------------------------------------------


def _require(allowed: bool, why: str) -> None:
    if not allowed:
        raise HttpError(403, why)


def _page(queryset: QuerySet[Any], limit: int, offset: int) -> list[Any]:
    limit = max(1, min(limit, PAGE_LIMIT))
    return list(queryset[max(offset, 0) : max(offset, 0) + limit])


def _decide(request: HttpRequest, gate_id: int, apply: Callable[[], object]) -> Gate:
    _require(request.user.has_perm("reviews.decide_gate"), "deciding gates is for operators")
    try:
        apply()
    except Gate.DoesNotExist:
        raise HttpError(404, f"no gate {gate_id}") from None
    except GateAlreadyDecided as exc:
        raise HttpError(409, str(exc)) from None
    except NotAllowed as exc:
        raise HttpError(403, str(exc)) from None
    except ReviewError as exc:
        raise HttpError(400, str(exc)) from None
    return Gate.objects.select_related("decided_by").get(pk=gate_id)


# -- tasks --------------------------------------------------------------------------------------


@api.get(
    "/tasks",
    response={200: list[TaskOut], **AUTH_ERRORS},
    summary="Tasks the caller may see, newest first",
)
def tasks_list(
    request: AuthenticatedHttpRequest, status: str | None = None, limit: int = 50, offset: int = 0
) -> list[Task]:
    tasks = tasks_visible_to(request.user).select_related("created_by").order_by("-id")
    if status:
        tasks = tasks.filter(status=status)
    return _page(tasks, limit, offset)


@api.get(
    "/tasks/stopped",
    response={200: list[TaskOut], **AUTH_ERRORS},
    summary="Tasks stopped for a human",
)
def tasks_stopped(
    request: AuthenticatedHttpRequest, limit: int = 50, offset: int = 0
) -> list[Task]:
    _require(
        request.user.has_perm(READ_REVIEWS), "the review queues are for operators and auditors"
    )
    tasks = (
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
        .select_related("created_by")
        .order_by("status_changed_at", "id")
    )
    return _page(tasks, limit, offset)


@api.get("/tasks/{task_id}", response={200: TaskOut, 404: Error, **AUTH_ERRORS})
def task_get(request: AuthenticatedHttpRequest, task_id: int) -> Task:
    task = tasks_visible_to(request.user).select_related("created_by").filter(pk=task_id).first()
    if task is None:
        raise HttpError(404, f"no task {task_id}")
    return task


@api.post(
    "/tasks", response={201: TaskOut, 400: Error, 403: Error, **AUTH_ERRORS}, summary="Start a task"
)
def task_start(request: AuthenticatedHttpRequest, payload: TaskIn) -> Status[Task]:
    """Start a task as the token's user, who needs the task-starter role (403 otherwise)."""
    try:
        task = task_create(
            agent=payload.agent,
            goal=payload.goal,
            input=payload.input,
            started_by=request.user,
            token_budget=payload.token_budget,
            cost_budget=payload.cost_budget,
            wall_time_budget_seconds=payload.wall_time_budget_seconds,
        )
    except StartRefused as exc:
        raise HttpError(403, str(exc)) from None
    except (AgentOpsError, ValueError) as exc:  # unknown agent, input that is not JSON, no goal
        raise HttpError(400, str(exc)) from None
    return Status(201, task)


# -- gates --------------------------------------------------------------------------------------


@api.get(
    "/gates", response={200: list[GateOut], **AUTH_ERRORS}, summary="Gates, open ones by default"
)
def gates_list(
    request: AuthenticatedHttpRequest,
    status: str = GateStatus.OPEN,
    limit: int = 50,
    offset: int = 0,
) -> list[Gate]:
    _require(
        request.user.has_perm(READ_REVIEWS), "the review queues are for operators and auditors"
    )
    gates = Gate.objects.filter(status=status).select_related("decided_by").order_by("due_at")
    return _page(gates, limit, offset)


@api.get("/gates/{gate_id}", response={200: GateOut, 404: Error, **AUTH_ERRORS})
def gate_get(request: AuthenticatedHttpRequest, gate_id: int) -> Gate:
    _require(request.user.has_perm(READ_REVIEWS), "gates are for operators and auditors")
    gate = Gate.objects.select_related("decided_by").filter(pk=gate_id).first()
    if gate is None:
        raise HttpError(404, f"no gate {gate_id}")
    return gate


DECISION_ERRORS = {400: Error, 403: Error, 404: Error, 409: Error, **AUTH_ERRORS}


@api.post("/gates/{gate_id}/approve", response={200: GateOut, **DECISION_ERRORS})
def gate_approve_api(request: AuthenticatedHttpRequest, gate_id: int, payload: ApproveIn) -> Gate:
    return _decide(
        request,
        gate_id,
        lambda: gate_approve(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=payload.seen_digest,
            reason=payload.reason,
        ),
    )


@api.post("/gates/{gate_id}/reject", response={200: GateOut, **DECISION_ERRORS})
def gate_reject_api(request: AuthenticatedHttpRequest, gate_id: int, payload: RejectIn) -> Gate:
    return _decide(
        request,
        gate_id,
        lambda: gate_reject(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=payload.seen_digest,
            feedback=payload.feedback,
        ),
    )


@api.post("/gates/{gate_id}/edit", response={200: GateOut, **DECISION_ERRORS})
def gate_edit_api(request: AuthenticatedHttpRequest, gate_id: int, payload: EditIn) -> Gate:
    return _decide(
        request,
        gate_id,
        lambda: gate_edit_and_approve(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=payload.seen_digest,
            arguments=payload.arguments,
            reason=payload.reason,
        ),
    )


# -- audit queue --------------------------------------------------------------------------------


@api.get("/audit", response={200: list[AuditItemOut], **AUTH_ERRORS}, summary="The audit queue")
def audit_list(
    request: AuthenticatedHttpRequest,
    status: str = AuditStatus.PENDING,
    limit: int = 50,
    offset: int = 0,
) -> list[AuditItem]:
    _require(request.user.has_perm(READ_REVIEWS), "the audit queue is for operators and auditors")
    items = AuditItem.objects.filter(status=status).order_by("created_at", "id")
    return _page(items, limit, offset)
