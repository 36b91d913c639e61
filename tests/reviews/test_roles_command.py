"""`manage.py roles`: put a person in role groups, take them out, list who holds which role; a
person or a group that does not exist is refused and nothing changes."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def roles(*args: str) -> str:
    out = StringIO()
    call_command("roles", *args, stdout=out)
    return out.getvalue()


def test_roles_add_and_remove_change_the_persons_groups(django_user_model):
    bob = django_user_model.objects.create_user(username="bob", password="pw-for-tests")

    assert roles("add", "bob", "operators", "task starters") == (
        "bob is now in operators, task starters\n"
    )
    assert sorted(bob.groups.values_list("name", flat=True)) == ["operators", "task starters"]
    bob = django_user_model.objects.get(pk=bob.pk)
    assert bob.has_perm("reviews.decide_gate")
    assert bob.has_perm("agentops.start_task")

    assert roles("remove", "bob", "task starters") == "bob is now out of task starters\n"
    assert list(bob.groups.values_list("name", flat=True)) == ["operators"]
    listed = roles().splitlines()
    assert "operators (decide gates and stopped tasks, claim and assign, pause, resume and " \
        "cancel tasks): bob" in listed  # fmt: skip
    assert "task starters (start tasks in the form and the API): nobody" in listed


def test_roles_refuses_an_unknown_person_or_group_and_changes_nothing(django_user_model):
    bob = django_user_model.objects.create_user(username="bob", password="pw-for-tests")

    with pytest.raises(CommandError, match="no user 'alice': create them first"):
        roles("add", "alice", "operators")
    with pytest.raises(CommandError) as refused:
        roles("add", "bob", "operators", "operator")
    assert str(refused.value).startswith("no group 'operator'; the groups are: auditors, operators")
    assert not bob.groups.exists()
    with pytest.raises(CommandError, match=r"roles add USERNAME GROUP \[GROUP \.\.\.\]"):
        roles("add", "bob")
