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

from agentops.engine import task_abort, task_create, task_pause
from agentops.engine.interventions import task_cancel
from agentops.engine.runner import task_advance
from agentops.engine.transitions import (
    EventSpec,
    ledger_transition,
    task_append_event,
    task_claim,
)
from agentops.models import Step, Task, ToolCall
from agentops.plumbing.web import POLL_VERSION_HEADER
from agentops.states import LedgerStatus, TaskStatus
from tests.builders import signed_in
from tests.factories import gated_refund_row, stopped_trip_row
from tests.statuses import status_walk


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
    return signed_in(client, user)


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

    # the session, the user with their groups and permission rows, then one statement: the
    # task with its ledger summary and its family
    with django_assert_max_num_queries(3):
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

    # the session, the user with their groups and permission rows, one digest per row shown
    with django_assert_max_num_queries(3):
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


@pytest.mark.django_db
def test_the_cancelled_filter_polls_its_own_rows(reader: Any, user: Any) -> None:
    first = make_task()
    task_cancel(task_id=first.pk, actor=user)
    url = f"{TASKS}?status=cancelled"
    version = version_of(reader.get(url).content.decode())
    assert poll(reader, url, version).status_code == 204

    # An abort nobody cancelled is not on this list: the version stays.
    task_abort(task_id=make_task().pk, actor=user)
    assert poll(reader, url, version).status_code == 204

    again = make_task(goal="Refund order B2002")
    task_cancel(task_id=again.pk, actor=user)
    _changed(reader, url, version, lambda html: f"#{again.pk}<" in html)


# -- every kind of change the pages show ------------------------------------------------------


def ledger_row(task: Task, *, key: str = "poll-call-1") -> ToolCall:
    """A ledger row on the task's first step, as the runner records one before its call."""
    step = Step.objects.filter(task=task).order_by("ordinal").first()
    assert step is not None
    return ToolCall.objects.create(
        task=task,
        step=step,
        tool="issue_refund",
        side_effect="financial",
        args={"amount": 5},
        args_digest="0" * 64,
        idempotency_key=key,
    )


@pytest.mark.django_db
def test_a_gate_opening_comes_back_on_the_page_and_the_list(reader: Any) -> None:
    task = make_task()
    page = version_of(reader.get(page_url(task)).content.decode())
    listed = version_of(reader.get(TASKS).content.decode())

    # The status alone (a raw UPDATE: neither `updated_at` nor `last_seq` moves).
    status_walk(task, TaskStatus.AWAITING_APPROVAL)

    _changed(reader, page_url(task), page, lambda html: "badge-awaiting_approval" in html)
    _changed(reader, TASKS, listed, lambda html: "badge-awaiting_approval" in html)


@pytest.mark.django_db
def test_a_decided_gate_comes_back_on_the_page(
    django_user_model: Any, reader: Any, user: Any, redis_clean: None
) -> None:
    from django.contrib.auth.models import Group

    from reviews.services import gate_approve

    task = gated_refund_row(created_by=user)
    gate = task.gates.get()
    operator = django_user_model.objects.create_user(username="otto", password="pw-for-tests")
    operator.groups.add(Group.objects.get_or_create(name="operators")[0])
    version = version_of(reader.get(page_url(task)).content.decode())

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    _changed(reader, page_url(task), version, lambda html: "badge-awaiting_approval" not in html)


@pytest.mark.django_db
def test_a_stop_on_a_failure_comes_back_with_the_failure(reader: Any) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    status_walk(task, TaskStatus.NEEDS_ATTENTION)
    failure = {"kind": "authorization_gap", "layer": "tool", "message": "hotels.book: 403"}
    Task.objects.filter(pk=task.pk).update(failure=failure)

    _changed(reader, page_url(task), version, lambda html: "hotels.book: 403" in html)


@pytest.mark.django_db
def test_a_modified_budget_comes_back(reader: Any) -> None:
    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    Task.objects.filter(pk=task.pk).update(token_budget=424242)

    _changed(reader, page_url(task), version, lambda html: "424242" in html)


@pytest.mark.django_db
def test_a_new_ledger_row_and_its_compensation_come_back(reader: Any) -> None:
    task = stopped_trip_row()
    page = version_of(reader.get(page_url(task)).content.decode())

    call = ledger_row(task)

    _changed(reader, page_url(task), page, lambda html: call.idempotency_key in html)
    page = version_of(reader.get(page_url(task), HTTP_HX_REQUEST="true").content.decode())
    listed = version_of(reader.get(TASKS).content.decode())

    assert ledger_transition(call_id=call.pk, target=LedgerStatus.SUCCEEDED)
    assert ledger_transition(call_id=call.pk, target=LedgerStatus.COMPENSATED)

    _changed(reader, page_url(task), page, lambda html: "compensated" in html)
    _changed(reader, TASKS, listed, lambda html: "1 compensated" in html)


@pytest.mark.django_db
def test_a_parents_change_comes_back_on_its_childs_page(reader: Any) -> None:
    parent = stopped_trip_row()
    child = make_task()
    step = Step.objects.filter(task=parent).order_by("ordinal").first()
    Task.objects.filter(pk=child.pk).update(parent_id=parent.pk, parent_step=step, fanout_index=0)
    version = version_of(reader.get(page_url(child)).content.decode())
    assert f"task #{parent.pk}" in reader.get(page_url(child)).content.decode()

    status_walk(parent, TaskStatus.ABORTED)

    _changed(reader, page_url(child), version, lambda html: "badge-aborted" in html)


@pytest.mark.django_db
def test_a_next_page_that_goes_comes_back(reader: Any) -> None:
    from agentops.views import PAGE_SIZE

    oldest = make_task(goal="the oldest")
    for n in range(PAGE_SIZE):
        make_task(goal=f"Refund order {n}")
    queued = f"{TASKS}?status={TaskStatus.QUEUED}"
    html = reader.get(queued).content.decode()
    assert 'rel="next"' in html
    version = version_of(html)

    # Page 1's rows stay the same; only whether a next page exists changes.
    status_walk(oldest, TaskStatus.PAUSED)

    _changed(reader, queued, version, lambda html: 'rel="next"' not in html)


# -- who may poll -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_version_is_only_good_for_the_viewer_it_was_made_for(
    client: Any, django_user_model: Any, reader: Any
) -> None:
    task = make_task()
    version = version_of(reader.get(TASKS).content.decode())
    stranger = django_user_model.objects.create_user(username="sam", password="pw-for-tests")
    client.force_login(stranger)

    answer = poll(client, TASKS, version)

    assert answer.status_code == 200
    assert f"#{task.pk}<" not in answer.content.decode()


@pytest.mark.django_db
def test_a_permission_taken_away_is_refused_at_the_next_poll(reader: Any, user: Any) -> None:
    from django.contrib.auth.models import Permission

    task = task_create(agent="refund", goal="someone else's", input={"order_id": "A1001"})
    version = version_of(reader.get(page_url(task)).content.decode())
    assert poll(reader, page_url(task), version).status_code == 204

    user.user_permissions.remove(
        Permission.objects.get(content_type__app_label="agentops", codename="view_task")
    )

    assert poll(reader, page_url(task), version).status_code == 404


@pytest.mark.django_db
def test_a_deactivated_or_expired_session_is_sent_to_log_in(reader: Any, user: Any) -> None:
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    task = make_task()
    version = version_of(reader.get(page_url(task)).content.decode())

    type(user).objects.filter(pk=user.pk).update(is_active=False)
    answer = poll(reader, page_url(task), version)
    assert answer.status_code == 200 and "/login" in answer["HX-Redirect"]

    type(user).objects.filter(pk=user.pk).update(is_active=True)
    assert poll(reader, page_url(task), version).status_code == 204
    Session.objects.update(expire_date=timezone.now())
    answer = poll(reader, page_url(task), version)
    assert answer.status_code == 200 and "/login" in answer["HX-Redirect"]
