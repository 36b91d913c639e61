"""Reads of scope grants: the grants that concern a task (its own, and its agent's), each with
its state now (in force, expired, revoked), and what the recovery panel offers to grant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from agentops.engine import missing_scope_of
from agentops.models import ScopeGrant, Task

GRANTS_SHOWN = 50


@dataclass(frozen=True)
class GrantLine:
    grant: ScopeGrant
    state: str  # "in force" | "expired" | "revoked"

    @property
    def in_force(self) -> bool:
        return self.state == "in force"


def grant_state(grant: ScopeGrant, now: datetime) -> str:
    if grant.revoked_at is not None:
        return "revoked"
    return "in force" if grant.expires_at > now else "expired"


def scope_grants_for_task(*, task: Task) -> list[GrantLine]:
    """The task's grants and its agent's, newest first (one query)."""
    now = timezone.now()
    grants = (
        ScopeGrant.objects.filter(Q(task_id=task.pk) | Q(task__isnull=True, agent=task.agent))
        .select_related("granted_by")
        .order_by("-created_at", "-id")[:GRANTS_SHOWN]
    )
    return [GrantLine(grant, grant_state(grant, now)) for grant in grants]


def scope_to_grant(*, task: Task) -> str | None:
    """The scope the recovery panel offers to grant: the one a service refused the stopped
    task's call for (None when it stopped for another reason)."""
    return missing_scope_of(task.failure)
