"""OAuth scopes as the engine reads them: the spelling of a scope, the scope a stored
authorization-gap failure names (what a service said it missed), and the scopes a tool call
carries (the agent's own and the grants in force). Reads only: the grants themselves are made and
revoked by `engine.grants`; the runner, the recovery advisor, the tools' HTTP helper and the
people's room read them here.

A grant to the agent does not apply to the tasks its granter started (`grants_for`), and whether
a grant is in force is read at each call, so an expired or revoked one stops applying at the next
call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import Q
from django.utils import timezone

from agentops.engine.errors import FailureKind

if TYPE_CHECKING:
    from agentops.engine.registry import Agent
    from agentops.models import Task

# `service:operation`, as the simulated services (and most OAuth APIs) spell a scope.
SCOPE = re.compile(r"[a-z][a-z0-9_-]{0,48}:[a-z0-9_.*-]{1,48}")


def missing_scope_of(failure: Mapping[str, Any] | None) -> str | None:
    """The scope a service refused a call for, as the stored failure names it (None when the
    failure is not a refusal for a named, well-formed scope)."""
    if not isinstance(failure, Mapping) or failure.get("kind") != FailureKind.AUTHORIZATION_GAP:
        return None
    detail = failure.get("detail")
    scope = detail.get("missing_scope") if isinstance(detail, Mapping) else None
    return scope if isinstance(scope, str) and SCOPE.fullmatch(scope) else None


def grants_in_force(*, task: Task, now: datetime | None = None) -> Q:
    """The grants that apply to `task` now: its own and its agent's, unexpired, not revoked."""
    return Q(grants_for(task=task), revoked_at__isnull=True, expires_at__gt=now or timezone.now())


def grants_for(*, task: Task) -> Q:
    """The grants that may apply to `task`: its own, and its agent's except those granted by the
    person who started it. Separation of duties: nobody grants scopes to a task they started,
    and an agent-wide grant does not reach the tasks its granter starts (now or later)."""
    agent_wide = Q(task__isnull=True, agent=task.agent)
    if task.created_by_id is not None:
        agent_wide &= ~Q(granted_by_id=task.created_by_id)
    return Q(task_id=task.pk) | agent_wide


def scopes_held(task: Task, agent: Agent) -> tuple[str, ...] | None:
    """The scopes a tool call of `task` carries: the agent's credential and the grants in force
    (one query). None when the agent declares no scopes (the unrestricted key)."""
    if agent.scopes is None:
        return None
    # Here, not at the top: the SDK hands `SCOPE` to tool modules that load before Django's
    # models are ready (or without Django set up at all), so this module imports no model.
    from agentops.models import ScopeGrant

    granted = ScopeGrant.objects.filter(grants_in_force(task=task)).values_list("scope", flat=True)
    return tuple(sorted({*agent.scopes, *granted}))
