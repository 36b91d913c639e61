"""Scope grants as people's decisions: grant a stopped task (or its agent) the scope a service
refused, for a bounded time, and revoke a grant. The engine makes the grant and retries the step
(`agentops.engine.scope_grant`); this module checks the person first (the "grant scopes"
permission, not the task's starter, the claim) and logs the decision in the same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils.translation import gettext as _

from agentops.engine import GrantRefused, scope_grant, scope_grant_revoke
from agentops.models import ScopeGrant, Task
from agentops.permissions import GRANT_SCOPES
from reviews.services._common import (
    NotAllowed,
    ReviewError,
    claim_check_or_take_over,
    decision_record,
)
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def grant_refusal(*, user: User, task: Task | None = None) -> str | None:
    """Why `user` may not grant scopes (to `task`), or None when they may."""
    if not user.has_perm(GRANT_SCOPES):
        return _("only scope granters may grant or revoke scopes")
    if task is not None and task.created_by_id is not None and task.created_by_id == user.pk:
        return _("you started this task, so someone else must grant it scopes")
    return None


def scope_grant_apply(
    *,
    task_id: int,
    scope: str,
    minutes: int,
    to_agent: bool,
    actor: User,
    reason: str,
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> ScopeGrant:
    """Grant `scope` to a task stopped for lack of it (or to its agent) for `minutes`, continue
    its step, and log `reviews.scope.granted`. Raises NotAllowed, HeldByOther, ReviewError (the
    grant cannot be made) and TransitionRefused (the task is no longer stopped)."""
    refusal = grant_refusal(user=actor)
    if refusal is not None:
        raise NotAllowed(refusal)

    def check(task: Task) -> None:
        refused = grant_refusal(user=actor, task=task)
        if refused is not None:
            raise NotAllowed(refused)
        claim_check_or_take_over(task_id=task.pk, actor=actor, take_over=take_over, via=via)

    with transaction.atomic():
        try:
            grant = scope_grant(
                task_id=task_id,
                scope=scope,
                minutes=minutes,
                to_agent=to_agent,
                actor=actor,
                reason=reason,
                check=check,
            )
        except GrantRefused as exc:
            raise ReviewError(exc.message) from None
        whom = f"agent {grant.agent}" if to_agent else f"task {task_id}"
        decision_record(
            action="reviews.scope.granted",
            actor=actor,
            task_id=task_id,
            subject=f"task {task_id}: {scope} granted to {whom}",
            reason=reason,
            detail={
                "grant": grant.pk,
                "scope": scope,
                "to": "agent" if to_agent else "task",
                "agent": grant.agent,
                "minutes": minutes,
                "expires_at": grant.expires_at.isoformat(),
                "then": "retry",
            },
            via=via,
        )
    return grant


def scope_grant_revoke_apply(
    *, grant_id: int, actor: User, reason: str, via: Via = VIA_UNKNOWN
) -> ScopeGrant:
    """Revoke a grant in force and log `reviews.scope.revoked`. Raises ScopeGrant.DoesNotExist,
    NotAllowed and ReviewError (already revoked or expired, no reason)."""
    refusal = grant_refusal(user=actor)
    if refusal is not None:
        raise NotAllowed(refusal)
    with transaction.atomic():
        try:
            grant = scope_grant_revoke(grant_id=grant_id, actor=actor, reason=reason)
        except GrantRefused as exc:
            raise ReviewError(exc.message) from None
        whom = f"agent {grant.agent}" if grant.task_id is None else f"task {grant.task_id}"
        decision_record(
            action="reviews.scope.revoked",
            actor=actor,
            task_id=grant.task_id,
            subject=f"grant {grant.pk}: {grant.scope} revoked from {whom}",
            reason=reason,
            detail={"grant": grant.pk, "scope": grant.scope, "agent": grant.agent},
            via=via,
        )
    return grant
