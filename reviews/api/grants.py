"""The review API's endpoints of scope grants: a task's grants, granting the scope a service
refused for a bounded time, and revoking a grant.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from ninja import Schema
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, TokenAuth
from agentops.engine import TransitionRefused
from agentops.models import ScopeGrant, Task
from agentops.permissions import GRANT_SCOPES
from agentops.selectors import tasks_visible_to
from reviews.api._common import GRANT_READERS, api_via, refusals, router
from reviews.selectors import grants_visible_to, scope_grants_for_task
from reviews.services import scope_grant_apply, scope_grant_revoke_apply


class GrantOut(Schema):
    id: int
    task_id: int | None
    agent: str
    scope: str
    reason: str
    granted_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    revoked_by: str
    revoke_reason: str
    in_force: bool

    @staticmethod
    def resolve_granted_by(grant: ScopeGrant) -> str:
        return grant.granted_by_label

    @staticmethod
    def resolve_revoked_by(grant: ScopeGrant) -> str:
        return grant.revoked_by_label

    @staticmethod
    def resolve_in_force(grant: ScopeGrant) -> bool:
        return grant.revoked_at is None and grant.expires_at > timezone.now()


class GrantIn(Schema):
    scope: str
    minutes: int
    to: Literal["task", "agent"] = "task"
    reason: str


class RevokeIn(Schema):
    reason: str


GRANTERS_ONLY = TokenAuth(GRANT_SCOPES, gettext_lazy("granting scopes is for scope granters"))


GRANT_RESPONSES = {200: GrantOut, 400: Error, 404: Error, 409: Error, **ROLE}


def _granted(apply: Callable[[], ScopeGrant]) -> ScopeGrant:
    """Run a grant or revocation; the service's refusals become 404, 409, 403 and 400."""
    with refusals(
        missing=_("no such task or grant"),
        not_found=(Task.DoesNotExist, ScopeGrant.DoesNotExist),
        conflicts=(TransitionRefused,),
    ):
        return apply()


@router.get(
    "/tasks/{task_id}/grants",
    response={200: list[GrantOut], 404: Error, **ROLE},
    summary="The scope grants of a task and of its agent, newest first",
    auth=GRANT_READERS,
)
def list_grants(request: ApiRequest, task_id: int) -> list[ScopeGrant]:
    task = tasks_visible_to(request.user).filter(pk=task_id).first()
    if task is None:
        raise HttpError(404, _("no task %(id)s") % {"id": task_id})
    return [line.grant for line in scope_grants_for_task(task=task)]


@router.post(
    "/tasks/{task_id}/grants",
    response=GRANT_RESPONSES,
    summary="Grant the scope a service refused, for a bounded time; the step continues",
    auth=GRANTERS_ONLY,
)
def grant_scope(request: ApiRequest, task_id: int, payload: GrantIn) -> ScopeGrant:
    if not tasks_visible_to(request.user).filter(pk=task_id).exists():
        raise HttpError(404, _("no task %(id)s") % {"id": task_id})
    return _granted(
        lambda: scope_grant_apply(
            task_id=task_id,
            scope=payload.scope,
            minutes=payload.minutes,
            to_agent=payload.to == "agent",
            actor=request.user,
            reason=payload.reason,
            via=api_via(request),
        )
    )


@router.post(
    "/grants/{grant_id}/revoke",
    response=GRANT_RESPONSES,
    summary="Revoke a scope grant in force",
    auth=GRANTERS_ONLY,
)
def revoke_grant(request: ApiRequest, grant_id: int, payload: RevokeIn) -> ScopeGrant:
    if not grants_visible_to(request.user).filter(pk=grant_id).exists():
        raise HttpError(404, _("no grant %(id)s") % {"id": grant_id})
    return _granted(
        lambda: scope_grant_revoke_apply(
            grant_id=grant_id, actor=request.user, reason=payload.reason, via=api_via(request)
        )
    )
