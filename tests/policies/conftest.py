"""Fixtures of the policy tests: a hand-built tool catalog and history, users, drafts.

The catalog is installed through `policies.catalog.registered` for the duration of a test, so
the tests do not depend on which agents happen to be registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission

from policies import catalog
from policies.catalog import RecordedAction
from policies.models import Policy, PolicyVersion
from policies.services import policy_draft_create, policy_rule_add
from tests.builders import signed_in

TOOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "lookup_order": ("read", ("orders",)),
    "read_user": ("read", ("identity",)),
    "issue_refund": ("financial", ("payments",)),
    "email_customer": ("notify", ("email",)),
    "update_record": ("write", ("prod-db",)),
    "archive_note": ("write", ("notes",)),
}

GATE = {"approver_group": "operators", "timeout_seconds": 3600, "timeout_action": "reject"}


@pytest.fixture
def history() -> list[RecordedAction]:
    """What the `tools` fixture's history provider returns; tests append to it."""
    return []


@pytest.fixture
def tools(history: list[RecordedAction]) -> Iterator[dict[str, tuple[str, tuple[str, ...]]]]:
    def recorded(since: datetime) -> list[RecordedAction]:
        return list(history)

    with catalog.registered(tools=lambda: dict(TOOLS), history=recorded):
        yield TOOLS


@pytest.fixture
def default_policy(db: Any) -> Policy:
    return Policy.objects.get(name="default")


@pytest.fixture
def author(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="ada", password="pw-for-tests")


@pytest.fixture
def policy_admin(django_user_model: Any) -> Any:
    """A user in the "policy admins" group the data migration creates."""
    user = django_user_model.objects.create_user(username="padmin", password="pw-for-tests")
    user.groups.add(Group.objects.get(name="policy admins"))
    return user


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    """A signed-in user with every policies permission except publishing."""
    user = django_user_model.objects.create_user(username="oscar", password="pw-for-tests")
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="policies").exclude(
            codename="publish_policyversion"
        )
    )
    return user


@pytest.fixture
def admin_client(client: Any, policy_admin: Any) -> Any:
    return signed_in(client, policy_admin)


def make_draft(
    *,
    policy: Policy,
    author: Any,
    rules: list[dict[str, Any]] | None = None,
    empty: bool = False,
) -> PolicyVersion:
    """A draft of `policy`: a copy of its active version, or empty plus `rules` in order."""
    if empty or rules is not None:
        draft = PolicyVersion.objects.create(policy=policy, author_label="test")
        for i, fields in enumerate(rules or []):
            policy_rule_add(draft=draft, author=author, fields=fields, position=i)
        return PolicyVersion.objects.get(pk=draft.pk)
    return policy_draft_create(policy=policy, author=author)
