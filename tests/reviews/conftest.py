"""Fixtures of the review tests: the role groups and one user per role (builders are in
`tests.reviews.builders`).

Transactional tests flush the database, migration data included, so the role groups are created
here from the same lists the migrations use.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission

from tests import slack_api

REVIEW_GROUPS = importlib.import_module("reviews.migrations.0003_operator_and_auditor_groups")
POLICY_GROUP = importlib.import_module("policies.migrations.0004_policy_admins_group")
STARTER_GROUP = importlib.import_module("reviews.migrations.0008_task_starters_group")
GRANTER_GROUP = importlib.import_module("agentops.migrations.0022_scope_granters_group")
SENIOR_GROUP = importlib.import_module("reviews.migrations.0024_senior_auditors_group")
# Gates and audit items moved to agentops later, and their model permissions with them.
MOVED = importlib.import_module("reviews.migrations.0007_gate_and_audititem_to_agentops").MOVED


def listed_permissions() -> dict[str, list[tuple[str, str]]]:
    """Each role group's permissions as (app label, codename), from the migrations' lists."""
    listed = {
        name: [MOVED.get(pair, pair) for pair in pairs]
        for name, pairs in REVIEW_GROUPS.GROUPS.items()
    }
    listed[POLICY_GROUP.GROUP] = [("policies", codename) for codename in POLICY_GROUP.CODENAMES]
    listed[STARTER_GROUP.GROUP] = []
    listed[GRANTER_GROUP.GROUP] = []
    listed[SENIOR_GROUP.GROUP] = []
    return listed


def ensure_groups() -> dict[str, Group]:
    """The role groups with their permissions, made (or completed) as the migrations make them.

    Three queries when they are all there, as in every rolled-back test (the migrations made
    them); after a transactional test's flush they are made again. A review group's listed
    permission that does not exist is an error (`Permission.DoesNotExist`); the policy group
    gets those of its codenames that exist, as its migration gives it."""
    listed = listed_permissions()
    groups = {group.name: group for group in Group.objects.filter(name__in=listed)}
    for name in listed:
        if name not in groups:
            groups[name] = Group.objects.create(name=name)
    wanted = {pair for pairs in listed.values() for pair in pairs}
    permissions = {
        (app_label, codename): pk
        for app_label, codename, pk in Permission.objects.filter(
            codename__in={codename for _, codename in wanted}
        ).values_list("content_type__app_label", "codename", "pk")
        if (app_label, codename) in wanted
    }
    for name in REVIEW_GROUPS.GROUPS:
        for pair in listed[name]:
            if pair not in permissions:
                raise Permission.DoesNotExist(f"no permission {pair} for the group {name!r}")
    through = Group.permissions.through
    held = set(
        through.objects.filter(group__in=groups.values()).values_list("group_id", "permission_id")
    )
    missing = {
        (groups[name].pk, permissions[pair])
        for name, pairs in listed.items()
        for pair in pairs
        if pair in permissions
    } - held
    through.objects.bulk_create(
        through(group_id=group_id, permission_id=permission_id)
        for group_id, permission_id in sorted(missing)
    )
    return {name: groups[name] for name in listed}


@pytest.fixture
def groups(db: Any) -> dict[str, Group]:
    return ensure_groups()


def make_user(django_user_model: Any, username: str, *group_names: str) -> Any:
    """A user with a password, in the role groups `group_names` (which must exist)."""
    user = django_user_model.objects.create_user(username=username, password="pw-for-tests")
    if group_names:
        found = Group.objects.filter(name__in=group_names).values_list("pk", flat=True)
        if len(found) != len(set(group_names)):
            raise Group.DoesNotExist(f"not every group of {group_names} exists")
        through = django_user_model.groups.through
        through.objects.bulk_create(through(user_id=user.pk, group_id=pk) for pk in found)
    return user


@pytest.fixture
def operator(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "olga", "operators")


@pytest.fixture
def operator2(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "otto", "operators")


@pytest.fixture
def starter(groups: Any, django_user_model: Any) -> Any:
    """An operator who starts tasks (like the demo's operator), so separation of duties bars
    them from their own gates."""
    return make_user(django_user_model, "stan", "operators", "task starters")


@pytest.fixture
def task_starter(groups: Any, django_user_model: Any) -> Any:
    """Someone who may start tasks and holds no review role."""
    return make_user(django_user_model, "tess", "task starters")


@pytest.fixture
def granter(groups: Any, django_user_model: Any) -> Any:
    """An operator who may also grant scopes."""
    return make_user(django_user_model, "grace", "operators", "scope granters")


@pytest.fixture
def auditor(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "audrey", "auditors")


@pytest.fixture
def senior_auditor(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "sam", "senior auditors")


@pytest.fixture
def policy_admin(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "paula", "policy admins")


@pytest.fixture
def clock(monkeypatch: Any) -> Any:
    """Time as the test sets it: `timezone.now()` (and so `auto_now_add`) reads this clock."""
    from django.utils import timezone

    from tests.reviews.history import T0, Clock

    fixed = Clock(T0)
    monkeypatch.setattr(timezone, "now", fixed)
    return fixed


@pytest.fixture
def slack(settings: Any) -> Iterator[slack_api.StandInSlack]:
    """The stand-in Slack Web API (tests/slack_api.py), served over HTTP for one test, with the
    product's Slack app configured to use it."""
    stand_in, server = slack_api.serve()
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "PUBLIC_URL": "https://agentops.example.com",
        "SLACK_BOT_TOKEN": slack_api.BOT_TOKEN,
        "SLACK_SIGNING_SECRET": slack_api.SIGNING_SECRET,
        "SLACK_API_URL": stand_in.url,
        "NOTIFY_BACKOFF_SECONDS": 0.0,
    }
    yield stand_in
    server.shutdown()
    server.server_close()
