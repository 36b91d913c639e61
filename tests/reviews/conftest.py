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
# Gates and audit items moved to agentops later, and their model permissions with them.
MOVED = importlib.import_module("reviews.migrations.0007_gate_and_audititem_to_agentops").MOVED


def ensure_groups() -> dict[str, Group]:
    groups = {}
    for name, perms in REVIEW_GROUPS.GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for listed in perms:
            app_label, codename = MOVED.get(listed, listed)
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        groups[name] = group
    group, _ = Group.objects.get_or_create(name=POLICY_GROUP.GROUP)
    group.permissions.add(
        *Permission.objects.filter(
            content_type__app_label="policies", codename__in=POLICY_GROUP.CODENAMES
        )
    )
    groups[POLICY_GROUP.GROUP] = group
    groups[STARTER_GROUP.GROUP] = Group.objects.get_or_create(name=STARTER_GROUP.GROUP)[0]
    groups[GRANTER_GROUP.GROUP] = Group.objects.get_or_create(name=GRANTER_GROUP.GROUP)[0]
    return groups


@pytest.fixture
def groups(db: Any) -> dict[str, Group]:
    return ensure_groups()


def make_user(django_user_model: Any, username: str, *group_names: str) -> Any:
    user = django_user_model.objects.create_user(username=username, password="pw-for-tests")
    for name in group_names:
        user.groups.add(Group.objects.get(name=name))
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
