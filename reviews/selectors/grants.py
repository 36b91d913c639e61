"""Reads of scope grants: the grants that concern a task (its own, and its agent's), each with
its state now (in force, expired, revoked) and whether it may apply to the task at all (an agent's
grant does not reach a task its granter started: `agentops.engine.grants_for`), and what the
recovery panel offers to grant, and whom to ask when the viewer may not."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from agentops.engine import grants_for, missing_scope_of
from agentops.models import ScopeGrant, Task
from agentops.permissions import SCOPE_GRANTERS
from agentops.selectors import tasks_visible_to

if TYPE_CHECKING:
    from django.contrib.auth.models import User

GRANTS_SHOWN = 50


@dataclass(frozen=True)
class GrantLine:
    grant: ScopeGrant
    state: str  # "in force" | "expired" | "revoked"
    applies: bool = True  # False: an agent's grant by the person who started this task

    @property
    def in_force(self) -> bool:
        return self.state == "in force"

    @property
    def state_label(self) -> str:
        """The state in the reader's words (`state` stays the code)."""
        return _(GRANT_STATES.get(self.state, self.state))


# A grant's states, as `GrantLine.state_label` words them.
GRANT_STATES = {
    "in force": gettext_noop("in force"),
    "expired": gettext_noop("expired"),
    "revoked": gettext_noop("revoked"),
}


def grant_state(grant: ScopeGrant, now: datetime) -> str:
    if grant.revoked_at is not None:
        return "revoked"
    return "in force" if grant.expires_at > now else "expired"


def grants_visible_to(user: User) -> QuerySet[ScopeGrant]:
    """The grants `user` may find (and so act on): those of the tasks they may see
    (`tasks_visible_to`) and the agents' grants, which belong to no task. Others answer 404."""
    return ScopeGrant.objects.filter(
        Q(task__isnull=True) | Q(task__in=tasks_visible_to(user).values("pk"))
    )


def scope_grants_for_task(*, task: Task) -> list[GrantLine]:
    """The task's grants and its agent's, newest first (one query)."""
    now = timezone.now()
    grants = (
        ScopeGrant.objects.filter(Q(task_id=task.pk) | Q(task__isnull=True, agent=task.agent))
        .annotate(applies=ExpressionWrapper(grants_for(task=task), output_field=BooleanField()))
        .select_related("granted_by")
        .order_by("-created_at", "-id")[:GRANTS_SHOWN]
    )
    return [GrantLine(grant, grant_state(grant, now), applies=grant.applies) for grant in grants]


def scope_to_grant(*, task: Task) -> str | None:
    """The scope the recovery panel offers to grant: the one a service refused the stopped
    task's call for (None when it stopped for another reason)."""
    return missing_scope_of(task.failure)


def scope_granters_list(*, task: Task) -> list[str]:
    """Who may grant `task` a scope, for a person who may not (the recovery panel says whom to
    ask): the active members of the scope granters group, but the task's starter."""
    from django.contrib.auth import get_user_model

    people = get_user_model().objects.filter(is_active=True, groups__name=SCOPE_GRANTERS)
    if task.created_by_id is not None:
        people = people.exclude(pk=task.created_by_id)
    return list(people.order_by("username").distinct().values_list("username", flat=True))
