"""Scope grants: a person gives a task (or every task of its agent) one OAuth scope that a
service refused for lack of it, for a bounded time, and the stopped step continues under it.

A service names the scope it missed (`agents.remote`: 403 `insufficient_scope`, recorded in the
failure's `detail.missing_scope`); `scope_grant` grants exactly that scope, to the task stopped
on it, records `agentops.scope.granted` on the task and retries the stopped step, in one
transaction under the task's row lock: only that step runs again (same idempotency key), and
nothing else is repeated. Tool calls carry the grants in force (`scopes.scopes_held`, read at
each call), so a grant that expires or is revoked (`scope_grant_revoke`) stops applying at the
next call. The people's room checks who may grant and logs the decision in the same transaction
(`reviews.services.grants`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy

from agentops.engine.errors import AgentOpsError, TransitionRefused
from agentops.engine.interventions import task_retry
from agentops.engine.jsonvalues import redacted
from agentops.engine.scopes import SCOPE, missing_scope_of
from agentops.engine.transitions import EventSpec, task_append_event
from agentops.models import ScopeGrant, Task
from agentops.states import TaskStatus
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import StrOrPromise

# A grant is bounded: at most a week; the panel offers these durations (minutes).
GRANT_MAX_MINUTES = 7 * 24 * 60
# Each label whole, translated when the panel shows it.
GRANT_DURATIONS: tuple[tuple[int, StrOrPromise], ...] = (
    (15, gettext_lazy("15 minutes")),
    (60, gettext_lazy("1 hour")),
    (8 * 60, gettext_lazy("8 hours")),
    (24 * 60, gettext_lazy("1 day")),
    (GRANT_MAX_MINUTES, gettext_lazy("7 days")),
)
GRANTED = "agentops.scope.granted"
REVOKED = "agentops.scope.revoked"


class GrantRefused(AgentOpsError):
    """The grant (or its revocation) cannot be made; the message says why, for the person."""


GrantCheck = Callable[[Task], None]


def _no_check(task: Task) -> None:
    return None


def grant_check(*, scope: str, minutes: int, reason: str) -> None:
    """Raise GrantRefused unless the scope is well formed, the time bounded and a reason given."""
    if not SCOPE.fullmatch(scope):
        raise GrantRefused(
            Phrase(
                gettext_noop("%(scope)s is not a scope (service:operation)"),
                {"scope": repr(scope[:100])},
            )
        )
    if not 1 <= minutes <= GRANT_MAX_MINUTES:
        raise GrantRefused(
            Phrase(
                gettext_noop("a grant lasts 1 to %(most)s minutes (7 days)"),
                {"most": GRANT_MAX_MINUTES},
            )
        )
    if not reason.strip():
        raise GrantRefused(Phrase(gettext_noop("say why the scope is granted")))


def scope_grant(
    *,
    task_id: int,
    scope: str,
    minutes: int,
    to_agent: bool,
    actor: User,
    reason: str,
    check: GrantCheck = _no_check,
) -> ScopeGrant:
    """Grant `scope` to the task (or to its agent, `to_agent`) for `minutes`, and retry the step
    the service refused for lack of it; one transaction (a savepoint of the caller's).

    Raises TransitionRefused when the task is not stopped (someone acted first), GrantRefused
    when it did not stop for lack of exactly this scope (or the grant is malformed); whatever
    `check` raises on the locked task refuses it too."""
    grant_check(scope=scope, minutes=minutes, reason=reason)
    with transaction.atomic():
        task = Task.objects.select_for_update(of=("self",)).get(pk=task_id)
        if task.status != TaskStatus.NEEDS_ATTENTION:
            raise TransitionRefused(
                Phrase(
                    gettext_noop("task %(task)s is %(status)s; there is nothing to grant"),
                    {"task": task_id, "status": task.status},
                )
            )
        named = missing_scope_of(task.failure)
        if named is None:
            raise GrantRefused(
                Phrase(
                    gettext_noop("task %(task)s did not stop for a missing scope"),
                    {"task": task_id},
                )
            )
        if named != scope:
            raise GrantRefused(
                Phrase(
                    gettext_noop("the service refused for lack of %(named)s, not %(scope)s"),
                    {"named": named, "scope": scope},
                )
            )
        check(task)
        now = timezone.now()
        grant = ScopeGrant.objects.create(
            task=None if to_agent else task,
            agent=task.agent,
            scope=scope,
            reason=redacted(reason.strip()),
            granted_by=actor if getattr(actor, "pk", None) else None,
            granted_by_label=getattr(actor, "username", "") or "system",
            created_at=now,
            expires_at=now + timedelta(minutes=minutes),
        )
        task_append_event(
            task_id=task_id,
            event=EventSpec(GRANTED, payload=grant_payload(grant)),
            actor=actor,
        )
        task_retry(task_id=task_id, actor=actor, reason=f"continues under the grant of {scope}")
    return grant


def grant_payload(grant: ScopeGrant) -> dict[str, Any]:
    return {
        "grant": grant.pk,
        "scope": grant.scope,
        "to": "task" if grant.task_id else f"agent {grant.agent}",
        "expires_at": grant.expires_at.isoformat(),
    }


def scope_grant_revoke(
    *,
    grant_id: int,
    actor: User,
    reason: str,
    check: Callable[[ScopeGrant], None] | None = None,
) -> ScopeGrant:
    """Revoke a grant in force: calls from now on no longer carry its scope. Raises
    GrantRefused when it is already revoked or expired, or no reason is given."""
    if not reason.strip():
        raise GrantRefused(Phrase(gettext_noop("say why the grant is revoked")))
    with transaction.atomic():
        grant = ScopeGrant.objects.select_for_update().get(pk=grant_id)
        now = timezone.now()
        if grant.revoked_at is not None:
            raise GrantRefused(
                Phrase(
                    gettext_noop("this grant was already revoked by %(who)s"),
                    {"who": grant.revoked_by_label},
                )
            )
        if grant.expires_at <= now:
            raise GrantRefused(Phrase(gettext_noop("this grant has expired already")))
        if check is not None:
            check(grant)
        ScopeGrant.objects.filter(pk=grant.pk).update(
            revoked_at=now,
            revoked_by=actor if getattr(actor, "pk", None) else None,
            revoked_by_label=getattr(actor, "username", "") or "system",
            revoke_reason=redacted(reason.strip()),
        )
        grant.refresh_from_db()
        if grant.task_id is not None:
            task_append_event(
                task_id=grant.task_id,
                event=EventSpec(
                    REVOKED, payload={**grant_payload(grant), "reason": grant.revoke_reason}
                ),
                actor=actor,
            )
    return grant
