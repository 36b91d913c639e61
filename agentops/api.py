"""The JSON API (`/api/v1/`), for the tools around the product: what every app's endpoints share
(the API object, bearer-token authentication, the error answers, paging), and the task endpoints.

Each app mounts its own django-ninja `Router` (this module's `router`: tasks; `reviews.api`:
stopped tasks, gates, the audit queue); the project shell (`agentops/urls.py`) builds the one
`AgentopsApi` with `api_build` and mounts them all under `/api/v1/`. The endpoints use the same
selectors and services as the pages, so the same rules hold: each app's permissions (asked
through `user.has_perm`), and for gates the digest the caller saw, separation of duties and the
decision log (`reviews.api`).

Requests authenticate with a personal bearer token (`Authorization: Bearer ao_...`,
`agentops.tokens`); the actor is the token's user. Browser sessions do not authenticate here, so
the API needs no CSRF token and the pages' CSRF rules stay as they are. Bad tokens are counted per
client address (`agentops.plumbing.throttle`): past the limit every token from that address, good or
bad, answers 429 with Retry-After until the lockout ends (checked before the token is looked up, so
a guesser learns nothing more).

The order of checks is the same for every operation: throttle (429), token (401 with a
`WWW-Authenticate: Bearer` challenge), role (403), and only then the path, query and body (422),
so a caller without the role learns nothing about what the operation takes. Everything under
`/api/v1/` answers JSON, unknown paths (404) and wrong methods (405) included, and every status
an operation answers is declared in the OpenAPI description (`/api/v1/openapi.json`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.core.exceptions import RequestDataTooBig
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import URLPattern, URLResolver, re_path
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, ngettext
from ninja import NinjaAPI, Router, Schema, Status
from ninja.errors import AuthenticationError, HttpError, Throttled
from ninja.openapi.schema import OpenAPISchema
from ninja.security import HttpBearer

from agentops.engine import START_TASK, task_create
from agentops.engine.errors import AgentOpsError, StartRefused, message_of
from agentops.engine.needs import agents_offered
from agentops.models import ApiToken, Task
from agentops.plumbing import throttle
from agentops.plumbing.outages import UNAVAILABLE, dependency_of
from agentops.plumbing.web import AuthenticatedHttpRequest, body_too_big_words
from agentops.selectors import archived_task_visible_to, archived_task_words, tasks_visible_to
from agentops.states import TaskStatus
from agentops.tokens import api_token_live

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import StrOrPromise
    from ninja.operation import Operation

PAGE_LIMIT = 100
logger = logging.getLogger(__name__)

REALM = "agentops API"
# What a 503 asks a client to wait: about one capped reconnect wait of the workers.
UNAVAILABLE_RETRY_SECONDS = 5
DOCS_PATH = "/api/v1/docs"
# Why a bearer token was refused: the challenge's `error_description` (English, a header is
# ASCII) and, translated, the answer's `detail`.
TOKEN_REFUSED = gettext_noop("the token is unknown, revoked, or its user is inactive")


class ApiRequest(AuthenticatedHttpRequest):
    """A request that passed `TokenAuth`: `auth` is the token it carried."""

    auth: ApiToken


class TokenAuth(HttpBearer):
    """A live personal token (else 401); with `permission`, its user must hold it (else 403).

    The role is checked here, in authentication, because django-ninja runs authentication before
    it reads the path, query and body: a caller without the role gets 403 without learning
    anything about what the operation takes."""

    def __init__(
        self,
        permission: str | None = None,
        refusal: StrOrPromise | Callable[[User], str] = "",
    ) -> None:
        super().__init__()
        self.permission = permission
        self.refusal = refusal

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        client = throttle.client_address(request)
        keys = [throttle.address_key(throttle.Scope.API_ADDRESS, client)]
        if wait := throttle.throttle_wait(keys):
            raise Throttled(wait=wait)
        row = api_token_live(token)
        if row is None:
            if wait := throttle.throttle_fail(keys, client=client):
                raise Throttled(wait=wait)
            return None
        request.user = row.user
        if self.permission and not row.user.has_perm(self.permission):
            # A refusal made when the module loaded is lazy: written now, in the request's
            # language.
            refusal = self.refusal(row.user) if callable(self.refusal) else str(self.refusal)
            raise HttpError(403, refusal)
        return row


class AgentopsApi(NinjaAPI):
    """NinjaAPI with readable operation ids, the bearer-token answers (401 with its challenge,
    429 with Retry-After) and JSON for every answer under its prefix. The project shell makes
    one (`api_build`) and mounts every app's router on it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exception_handler(Throttled)(self._throttled)
        self.exception_handler(RequestDataTooBig)(self._too_big)
        self.exception_handler(AuthenticationError)(self._unauthenticated)
        for unavailable in UNAVAILABLE:
            self.exception_handler(unavailable)(self._unavailable)

    def get_openapi_operation_id(self, operation: Operation) -> str:
        # Generated clients name their functions after these: `list_gates`, `approve_gate`.
        return operation.view_func.__name__

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        enums = {name for name, found in schema["components"]["schemas"].items() if "enum" in found}
        for operation in (op for path in schema["paths"].values() for op in path.values()):
            for parameter in operation.get("parameters", []):
                parameter["schema"] = _enum_by_reference(parameter["schema"], enums)
        return schema

    def _get_urls(self) -> list[URLResolver | URLPattern]:
        # django-ninja answers a wrong method with a plain-text 405, and its root (`/api/v1/`)
        # and unknown paths with the site's HTML 404 page; a client of a JSON API should get
        # JSON for all of them. The root keeps its name: ninja reverses it for the schema.
        urls = super()._get_urls()
        for url in urls:
            if isinstance(url, URLPattern):
                root = url.name == "api-root"
                url.callback = self._unknown_path if root else self._json_405(url.callback)
        return [*urls, re_path(r"^", self._unknown_path, name="unknown-path")]

    def _json_405(self, view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            response = view(request, *args, **kwargs)
            if response.status_code != 405:
                return response
            allowed = response.get("Allow", "")
            answer = self.create_response(
                request,
                {
                    "detail": _("%(method)s is not allowed here; allowed: %(allowed)s")
                    % {"method": request.method, "allowed": allowed}
                },
                status=405,
            )
            answer["Allow"] = allowed
            return answer

        return wrapped

    def _unknown_path(self, request: HttpRequest) -> HttpResponse:
        return self.create_response(
            request,
            {
                "detail": _("no such path: %(path)s; the operations are at %(docs)s")
                % {"path": request.path, "docs": DOCS_PATH}
            },
            status=404,
        )

    def _too_big(self, request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        return self.create_response(request, {"detail": body_too_big_words()}, status=400)

    def _throttled(self, request: HttpRequest, exc: Throttled) -> HttpResponse:
        wait = int(exc.wait or 1)
        response = self.create_response(
            request,
            {
                "detail": ngettext(
                    "too many bad tokens from this address; try again in %(wait)s second",
                    "too many bad tokens from this address; try again in %(wait)s seconds",
                    wait,
                )
                % {"wait": wait},
                "retry_after": wait,
            },
            status=429,
        )
        response["Retry-After"] = str(wait)
        return response

    def _unavailable(self, request: HttpRequest, exc: Exception) -> HttpResponse:
        """503 with Retry-After while PostgreSQL or Redis does not answer (or a statement ran
        past its limit): a client tries again later instead of reading an HTML error page.
        Nothing was done that the client would repeat: a decision is one transaction."""
        dependency = dependency_of(exc)
        logger.warning("api: %s unavailable (%s), answered 503", dependency, type(exc).__name__)
        response = self.create_response(
            request,
            {
                "detail": ngettext(
                    "%(dependency)s is unavailable; try again in %(wait)s second",
                    "%(dependency)s is unavailable; try again in %(wait)s seconds",
                    UNAVAILABLE_RETRY_SECONDS,
                )
                % {"dependency": dependency, "wait": UNAVAILABLE_RETRY_SECONDS},
                "retry_after": UNAVAILABLE_RETRY_SECONDS,
            },
            status=503,
        )
        response["Retry-After"] = str(UNAVAILABLE_RETRY_SECONDS)
        return response

    def _unauthenticated(self, request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        """401 with the challenge of RFC 6750: `error="invalid_token"` when a bearer token was sent
        but is unknown, revoked or its user inactive; a bare challenge when none was sent."""
        scheme, _space, token = request.headers.get("Authorization", "").partition(" ")
        challenge = f'Bearer realm="{REALM}"'
        if scheme.lower() == "bearer" and token.strip():
            # The header stays in English (a header is ASCII); the body is the reader's.
            challenge += f', error="invalid_token", error_description="{TOKEN_REFUSED}"'
            detail = _(TOKEN_REFUSED)
        else:
            detail = _("send a personal token: Authorization: Bearer ao_...")
        response = self.create_response(request, {"detail": detail}, status=401)
        response["WWW-Authenticate"] = challenge
        return response


def _enum_by_reference(schema: dict[str, Any], enums: set[str]) -> dict[str, Any]:
    """A query parameter with a default whose type is an enum of the components (`status` of
    the gates and the audit queue) points at that enum instead of the copy django-ninja inlines
    in an `allOf`: generated clients then take the same enum (GateStatus) as in the answers."""
    inlined = schema.get("allOf")
    if not inlined or len(inlined) != 1 or inlined[0].get("title") not in enums:
        return schema
    rest = {key: value for key, value in schema.items() if key != "allOf"}
    return {"$ref": f"#/components/schemas/{inlined[0]['title']}", **rest}


def api_build(*routers: Router) -> AgentopsApi:
    """The project's one API, with every app's router mounted in the order given. Django tries
    the URLs in that order, and a path parameter matches any segment: a router with a fixed path
    (`/tasks/stopped`) goes before one whose parameter would take it (`/tasks/{task_id}`)."""
    api = AgentopsApi(
        title="agentops API",
        version="1",
        urls_namespace="api",
        auth=TokenAuth(),
        docs_url="/docs",
    )
    for router in routers:
        api.add_router("", router)
    return api


# -- schemas every app's endpoints share --------------------------------------------------------


class Error(Schema):
    detail: str


class ThrottledError(Schema):
    """429: too many bad tokens from the caller's address; the Retry-After header says the same."""

    detail: str
    retry_after: int


class ValidationIssue(Schema):
    """One problem with the path, query or body: where (`["query", "status"]`), what kind, and
    a sentence (`Input should be 'open', 'approved', ...`)."""

    type: str
    loc: list[str | int]
    msg: str


class ValidationErrors(Schema):
    """422: the request's path, query or body does not fit the operation."""

    detail: list[ValidationIssue]


# Every operation authenticates and takes parameters: no valid token is 401, a locked-out address
# 429, a parameter or body that does not fit 422.
COMMON = {401: Error, 422: ValidationErrors, 429: ThrottledError}
# Operations behind a role add 403.
ROLE = {403: Error, **COMMON}


def page_of(queryset: QuerySet[Any], limit: int, offset: int) -> list[Any]:
    """One page of `queryset`: at most `limit` rows (1 to PAGE_LIMIT) from `offset`."""
    limit = max(1, min(limit, PAGE_LIMIT))
    return list(queryset[max(offset, 0) : max(offset, 0) + limit])


# -- tasks --------------------------------------------------------------------------------------

router = Router()


class TaskOut(Schema):
    id: int
    agent: str
    goal: str
    status: TaskStatus
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


class AgentOut(Schema):
    name: str
    description: str
    # Input fields a person may change on a running or paused task.
    editable_input: list[str]


@router.get(
    "/agents",
    response={200: list[AgentOut], **COMMON},
    summary="Agents a task may be started with here",
)
def list_agents(request: ApiRequest) -> list[dict[str, Any]]:
    """The agents the start form offers: registered, not hidden, and with every setting they
    need set in this deployment (`POST /tasks` refuses any other, naming what it lacks)."""
    return [
        {
            "name": agent.name,
            "description": agent.description,
            "editable_input": list(agent.editable_input),
        }
        for agent in agents_offered()
    ]


@router.get(
    "/tasks",
    response={200: list[TaskOut], **COMMON},
    summary="Tasks the caller may see, newest first",
)
def list_tasks(
    request: ApiRequest, status: TaskStatus | None = None, limit: int = 50, offset: int = 0
) -> list[Task]:
    tasks = tasks_visible_to(request.user).select_related("created_by").order_by("-id")
    if status:
        tasks = tasks.filter(status=status)
    return page_of(tasks, limit, offset)


@router.get(
    "/tasks/{task_id}",
    response={200: TaskOut, 404: Error, 410: Error, **COMMON},
    summary="One task",
)
def get_task(request: ApiRequest, task_id: int) -> Task:
    """One task; 410 when retention archived it and removed it (the detail says where it went)."""
    task = tasks_visible_to(request.user).select_related("created_by").filter(pk=task_id).first()
    if task is None:
        archived = archived_task_visible_to(request.user, task_id)
        if archived is not None:
            raise HttpError(410, archived_task_words(archived))
        raise HttpError(404, _("no task %(id)s") % {"id": task_id})
    return task


@router.post(
    "/tasks",
    response={201: TaskOut, 400: Error, **ROLE},
    summary="Start a task",
    # The engine's own refusal, so the API and `task_create` say the same.
    auth=TokenAuth(START_TASK, lambda user: StartRefused(user.get_username()).message),
)
def start_task(request: ApiRequest, payload: TaskIn) -> Status[Task]:
    """Start a task as the token's user, who needs the task-starter role (403 otherwise, before
    the body is read)."""
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
    except StartRefused as exc:  # the role was taken away between the two checks
        raise HttpError(403, exc.message) from None
    # An unknown agent or one this deployment cannot run, input that is not JSON, no goal.
    except (AgentOpsError, ValueError) as exc:
        raise HttpError(400, message_of(exc)) from None
    return Status(201, task)
