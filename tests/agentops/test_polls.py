"""The polled task list and task page answer "nothing changed" (an empty 204) when what they show
is the same, and their fragment again after every kind of change they show."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse, reverse_lazy

from agentops.engine.runner import task_advance
from agentops.engine.transitions import EventSpec, task_append_event, task_claim
from agentops.models import Step, Task, ToolCall
from agentops.services import task_create, task_pause
from agentops.web import POLL_VERSION_HEADER


@pytest.fixture
def user(django_user_model: Any) -> Any:
    """A person who may read every task and start tasks."""
    from django.contrib.auth.models import Group, Permission

    olga = django_user_model.objects.create_user(username="olga", password="pw-for-tests")
    olga.user_permissions.add(
        Permission.objects.get(content_type__app_label="agentops", codename="view_task")
    )
    olga.groups.add(Group.objects.get_or_create(name="task starters")[0])
    return olga


@pytest.fixture
def reader(client: Any, user: Any) -> Any:
    client.force_login(user)
    return client


TASKS = reverse_lazy("agentops:task_list")


def make_task(goal: str = "Refund order A1001") -> Task:
    return task_create(agent="refund", goal=goal, input={"order_id": "A1001"})


def version_of(html: str) -> str:
    found = re.search(r'"X-Poll-Version": "([0-9a-f]+(?:\.[0-9]+)?)"', html)
    assert found, "the polled fragment carries its version"
    return found.group(1)


def poll(client: Client, url: str, version: str) -> Any:
    return client.get(url, HTTP_HX_REQUEST="true", **{"HTTP_X_POLL_VERSION": version})


def page_url(task: Task) -> str:
    return reverse("agentops:task_detail", args=[task.pk])


def _changed(client: Client, url: str, version: str, expect: Callable[[str], bool]) -> None:
    answer = poll(client, url, version)
    assert answer.status_code == 200
    fragment = answer.content.decode()
    assert expect(fragment), fragment[:600]
    assert version_of(fragment) != version
    assert poll(client, url, version_of(fragment)).status_code == 204


# -- the task page ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_task_page_poll_with_the_current_version_is_an_empty_204_in_few_queries(
    reader: Any, django_assert_max_num_queries: Any
) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    # session, user, permission rows (the user's and their groups'), then one statement: the
    # task with its ledger summary and its family
    with django_assert_max_num_queries(4):
        unchanged = poll(reader, page_url(task), version)

    assert unchanged.status_code == 204 and unchanged.content == b""
    assert POLL_VERSION_HEADER in unchanged["Vary"]


@pytest.mark.django_db
def test_a_claimed_task_comes_back_running(reader: Any) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    assert task_claim(task_id=task.pk, owner="test") is not None

    _changed(reader, page_url(task), version, lambda html: "badge-running" in html)


@pytest.mark.django_db
def test_a_new_event_comes_back(reader: Any) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    with transaction.atomic():
        task_append_event(task_id=task.pk, event=EventSpec("agentops.task.noted", payload={}))

    _changed(reader, page_url(task), version, lambda html: "agentops.task.noted" in html)


@pytest.mark.django_db
def test_a_paused_task_comes_back_paused(reader: Any, user: Any) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    task_pause(task_id=task.pk, actor=user, reason="checking")

    _changed(reader, page_url(task), version, lambda html: "badge-paused" in html)


@pytest.mark.django_db
def test_steps_done_and_their_ledger_rows_come_back(
    reader: Any, sim: str, redis_clean: None
) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    task_advance(task_id=task.pk, owner="test")

    # Still running (200) or finished in that slice (286, the last fragment): either way shown.
    answer = poll(reader, page_url(task), version)
    assert answer.status_code in (200, 286)
    html = answer.content.decode()
    for call in ToolCall.objects.filter(task=task):
        assert call.idempotency_key in html
    assert Step.objects.filter(task=task).exists()
    after = Task.objects.get(pk=task.pk)
    assert after.step_count and after.last_seq > 1
    assert f"step {min(after.current_step + 1, after.step_count)} of {after.step_count}" in html


@pytest.mark.django_db
def test_a_task_page_poll_of_another_persons_task_is_a_404_whatever_it_sends(
    client: Any, django_user_model: Any, reader: Any
) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())
    stranger = django_user_model.objects.create_user(username="sam", password="pw-for-tests")
    client.force_login(stranger)

    assert poll(client, page_url(task), version).status_code == 404


# -- the task list ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_task_list_poll_with_the_current_version_is_an_empty_204_in_few_queries(
    reader: Any, django_assert_max_num_queries: Any
) -> None:
    make_task()
    version = version_of(reader.get(TASKS).content.decode())

    # session, user, permission rows (the user's and their groups'), the page's rows as values
    with django_assert_max_num_queries(4):
        unchanged = poll(reader, TASKS, version)

    assert unchanged.status_code == 204 and unchanged.content == b""


@pytest.mark.django_db
def test_a_new_task_comes_back_on_the_list(reader: Any) -> None:
    make_task()
    version = version_of(reader.get(TASKS).content.decode())

    added = make_task(goal="Refund order B2002")

    _changed(reader, TASKS, version, lambda html: f"#{added.pk}<" in html)


@pytest.mark.django_db
def test_a_status_change_comes_back_on_the_list(reader: Any, user: Any) -> None:
    task = make_task()
    version = version_of(reader.get(TASKS).content.decode())

    task_pause(task_id=task.pk, actor=user, reason="checking")

    _changed(reader, TASKS, version, lambda html: "badge-paused" in html)


@pytest.mark.django_db
def test_progress_comes_back_on_the_list(reader: Any, sim: str, redis_clean: None) -> None:
    task = make_task()
    version = version_of(reader.get(TASKS).content.decode())

    task_advance(task_id=task.pk, owner="test")

    after = Task.objects.get(pk=task.pk)
    assert after.step_count
    step = min(after.current_step + 1, after.step_count)
    _changed(reader, TASKS, version, lambda html: f"step {step} of {after.step_count}" in html)


@pytest.mark.django_db
def test_each_filter_and_page_has_its_own_version(reader: Any) -> None:
    make_task()
    everything = version_of(reader.get(TASKS).content.decode())

    queued = poll(reader, f"{TASKS}?status=paused", everything)

    assert queued.status_code == 200
    assert version_of(queued.content.decode()) != everything
