"""Each app declares its own permissions (`policies.permissions`, `agentops.permissions`,
`reviews.roles`) with the one mechanism of the web shell (`agentops.plumbing.web.role` and
`permissions_register`), and Django's `has_perm` answers for all of them."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from rules.permissions import permissions as registered

from agentops import permissions as agentops_permissions
from agentops.plumbing.web import role
from policies import permissions as policies_permissions
from reviews import roles as reviews_permissions

DECLARED = {
    "policies": policies_permissions.PERMISSIONS,
    "agentops": agentops_permissions.PERMISSIONS,
    "reviews": reviews_permissions.PERMISSIONS,
}


@pytest.mark.parametrize("app", DECLARED)
def test_an_app_declares_only_its_own_permissions(app: str) -> None:
    assert DECLARED[app]
    assert [name for name in DECLARED[app] if not name.startswith(f"{app}.")] == []


def test_the_registered_permissions_are_exactly_the_declared_ones() -> None:
    declared = {
        name: rule for permissions in DECLARED.values() for name, rule in permissions.items()
    }

    assert set(registered) == set(declared)
    assert all(registered[name] is predicate for name, (predicate, _) in declared.items())


@pytest.mark.django_db
def test_a_role_is_held_by_active_members_of_its_group_only(django_user_model: Any) -> None:
    group = Group.objects.create(name="night shift")
    member = django_user_model.objects.create_user("member")
    member.groups.add(group)
    inactive = django_user_model.objects.create_user("inactive", is_active=False)
    inactive.groups.add(group)
    outsider = django_user_model.objects.create_user("outsider")
    night_shift = role("night shift")

    assert night_shift(member)
    assert not night_shift(inactive)
    assert not night_shift(outsider)


@pytest.mark.django_db
def test_each_app_s_role_grants_its_permission_through_has_perm(django_user_model: Any) -> None:
    grants = {
        policies_permissions.POLICY_ADMINS: "policies.edit_policy",
        agentops_permissions.TASK_STARTERS: "agentops.start_task",
        agentops_permissions.SCOPE_GRANTERS: agentops_permissions.GRANT_SCOPES,
        "operators": "reviews.decide_gate",
    }
    for group, permission in grants.items():
        user = django_user_model.objects.create_user(f"in {group}")
        user.groups.add(Group.objects.get_or_create(name=group)[0])

        assert user.has_perm(permission)
        assert [p for p in grants.values() if user.has_perm(p)] == [permission]
