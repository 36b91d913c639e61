"""Putting people in groups: the roles (operators, auditors, senior auditors, task starters, scope
granters, policy admins) and the approver groups policies name.

The role groups are created by migrations; an approver group a policy names is made in the admin
(Groups). Joining or leaving names an existing user and existing groups, or changes nothing: a
misspelt group is refused with the groups there are, never created. Each change is one
transaction and is logged (who, which groups) by the command that asks for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from agentops.permissions import SCOPE_GRANTERS, TASK_STARTERS
from policies.permissions import POLICY_ADMINS
from reviews.services._common import ReviewError
from reviews.states import Role

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The role groups, as the README and the admin name them, with what each may do.
ROLE_GROUPS: dict[str, str] = {
    TASK_STARTERS: "start tasks in the form and the API",
    Role.OPERATORS.value: "decide gates and stopped tasks, claim and assign, pause, resume and "
    "cancel tasks",
    Role.AUDITORS.value: "review the audit queue; read the rest",
    Role.SENIOR_AUDITORS.value: "review the audit queue and settle the items whose reviewers "
    "disagree",
    SCOPE_GRANTERS: "grant a stopped task or its agent the scope a service refused",
    POLICY_ADMINS: "edit and publish policies",
}


def person_groups_change(
    *, username: str, join: Sequence[str] = (), leave: Sequence[str] = ()
) -> User:
    """Put the user `username` in the groups `join` and take them out of `leave`, in one
    transaction; ReviewError (nothing changed) for an unknown user or group."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ReviewError(
            f"no user {username!r}: create them first (agentops createsuperuser for the first "
            "one; the admin, /admin/auth/user/add/, for the others)"
        )
    names = [*join, *leave]
    found = {group.name: group for group in Group.objects.filter(name__in=names)}
    unknown = [name for name in names if name not in found]
    if unknown:
        there = ", ".join(sorted(Group.objects.values_list("name", flat=True)))
        raise ReviewError(f"no group {', '.join(map(repr, unknown))}; the groups are: {there}")
    with transaction.atomic():
        user.groups.add(*(found[name] for name in join))
        user.groups.remove(*(found[name] for name in leave))
    return user
