"""The polled inbox answers "nothing changed" (an empty 204) when the rows it shows are the same,
and its rows again after every kind of change they show (agentops.plumbing.web.poll_unchanged).

The inbox's tasks are rows (tests/factories.py), and the tests are rolled back: what a poll
shows is read in the request's own connection, no other process is involved."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agentops.models import Gate
from agentops.plumbing.web import POLL_VERSION_HEADER
from reviews.services import claim_release, claim_take, gate_approve
from reviews.templatetags.reviews_tags import times_steady_until
from reviews.views import queue
from tests.factories import gated_refund_row, stopped_trip_row
from tests.reviews.builders import client_for, open_gate

pytestmark = pytest.mark.django_db

INBOX = "/review/"


@pytest.fixture(autouse=True)
def still_clock(monkeypatch: Any) -> None:
    """Time stands still in these tests: the rows print relative times ("waiting 12 s"), which
    would otherwise change between two requests and rightly make the second one a change. A
    gate opened now is due a whole number of minutes from now, the instant its "30 min left"
    turns "29 min left": its version would hold for no time at all. So the versions here hold
    whatever the times, except in the tests of the times (`real_times`)."""
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    monkeypatch.setattr(queue, "times_steady_until", lambda **_: None)


@pytest.fixture
def real_times(monkeypatch: Any) -> None:
    monkeypatch.setattr(queue, "times_steady_until", times_steady_until)


def version_of(fragment: str) -> str:
    """The version a rendered inbox (page or rows) carries in its hx-headers."""
    found = re.search(r'"X-Poll-Version": "([0-9a-f]+(?:\.[0-9]+)?)"', fragment)
    assert found, "the polled rows carry their version"
    return found.group(1)


def poll(client: Client, version: str, url: str = INBOX) -> Any:
    return client.get(url, HTTP_HX_REQUEST="true", **{"HTTP_X_POLL_VERSION": version})


def test_a_poll_with_the_current_version_gets_an_empty_204_in_few_queries(
    redis_clean, operator, starter, django_assert_max_num_queries
):
    gate = open_gate(gated_refund_row(created_by=starter))
    stopped_trip_row(created_by=starter)
    client = client_for(operator)
    page = client.get(INBOX).content.decode()
    assert f"gate-{gate.pk}" in page

    # the session, the user with their groups, and the inbox's state in one statement: no render.
    with django_assert_max_num_queries(3):
        unchanged = poll(client, version_of(page))

    assert unchanged.status_code == 204
    assert unchanged.content == b""
    assert POLL_VERSION_HEADER in unchanged["Vary"]


def test_a_poll_with_an_old_or_no_version_gets_the_rows(redis_clean, operator, starter):
    open_gate(gated_refund_row(created_by=starter))
    client = client_for(operator)

    without = client.get(INBOX, HTTP_HX_REQUEST="true")
    stale = poll(client, "0" * 24)

    assert without.status_code == 200 and 'id="inbox-rows"' in without.content.decode()
    assert stale.status_code == 200 and 'id="inbox-rows"' in stale.content.decode()


def test_a_full_page_load_is_never_an_empty_answer(redis_clean, operator, starter):
    open_gate(gated_refund_row(created_by=starter))
    client = client_for(operator)
    version = version_of(client.get(INBOX).content.decode())

    reload = client.get(INBOX, **{"HTTP_X_POLL_VERSION": version})

    assert reload.status_code == 200 and "<html" in reload.content.decode()


def _changed(client: Client, version: str, expect: Callable[[str], bool]) -> None:
    answer = poll(client, version)
    assert answer.status_code == 200
    fragment = answer.content.decode()
    assert expect(fragment), fragment[:400]
    assert version_of(fragment) != version
    assert poll(client, version_of(fragment)).status_code == 204


def test_a_new_gate_comes_back(redis_clean, operator, starter):
    client = client_for(operator)
    version = version_of(client.get(INBOX).content.decode())

    gate = open_gate(gated_refund_row(created_by=starter, order_id="B2002"))

    _changed(client, version, lambda rows: f'id="gate-{gate.pk}"' in rows)


def test_a_decided_gate_leaves(redis_clean, operator, starter):
    gate = open_gate(gated_refund_row(created_by=starter))
    client = client_for(operator)
    version = version_of(client.get(INBOX).content.decode())

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    _changed(client, version, lambda rows: f'id="gate-{gate.pk}"' not in rows)


def test_a_new_stopped_task_comes_back(redis_clean, operator, starter):
    client = client_for(operator)
    version = version_of(client.get(INBOX).content.decode())

    trip = stopped_trip_row(created_by=starter)

    _changed(client, version, lambda rows: f'id="task-{trip.pk}"' in rows)


def test_a_claim_taken_and_released_comes_back(redis_clean, operator, operator2, starter):
    task = gated_refund_row(created_by=starter)
    client = client_for(operator)
    version = version_of(client.get(INBOX).content.decode())

    claim_take(task_id=task.pk, actor=operator2)
    _changed(client, version, lambda rows: '<td translate="no">otto</td>' in rows)

    held = version_of(client.get(INBOX).content.decode())
    claim_release(task_id=task.pk, actor=operator2)
    _changed(client, held, lambda rows: "nobody" in rows)


def test_the_countdown_still_ticks(redis_clean, operator, starter, monkeypatch, real_times):
    gate = open_gate(gated_refund_row(created_by=starter))
    client = client_for(operator)
    Gate.objects.filter(pk=gate.pk).update(
        due_at=timezone.now() + timedelta(minutes=30, seconds=30)
    )
    page = client.get(INBOX).content.decode()
    assert ">30 min left<" in re.sub(r">\s+", ">", page)
    sooner = ">28 min left<"

    still = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: still() + timedelta(minutes=2))

    _changed(client, version_of(page), lambda rows: sooner in re.sub(r">\s+", ">", rows))


def test_a_version_holds_until_a_relative_time_on_the_rows_changes(
    redis_clean, operator, starter, monkeypatch, real_times
):
    gate = open_gate(gated_refund_row(created_by=starter))
    now = timezone.now()
    # Waiting 5 min 10 s (next change in 50 s), 30 min 20 s left (next change in 20 s).
    Gate.objects.filter(pk=gate.pk).update(
        created_at=now - timedelta(minutes=5, seconds=10),
        due_at=now + timedelta(minutes=30, seconds=20),
    )
    client = client_for(operator)
    version = version_of(client.get(INBOX).content.decode())

    monkeypatch.setattr(timezone, "now", lambda: now + timedelta(seconds=15))
    assert poll(client, version).status_code == 204

    monkeypatch.setattr(timezone, "now", lambda: now + timedelta(seconds=25))
    _changed(client, version, lambda rows: ">29 min left<" in re.sub(r">\s+", ">", rows))


def test_a_new_operator_in_the_assign_menu_comes_back(
    redis_clean, operator, starter, django_user_model
):
    open_gate(gated_refund_row(created_by=starter))
    client = client_for(operator)
    version = version_of(client.get(INBOX).content.decode())

    newcomer = django_user_model.objects.create_user("nadia", password="x")
    newcomer.groups.add(Group.objects.get(name="operators"))

    _changed(client, version, lambda rows: ">nadia</option>" in rows)


def test_the_version_is_the_viewers_own(redis_clean, operator, auditor, starter):
    open_gate(gated_refund_row(created_by=starter))
    operators_version = version_of(client_for(operator).get(INBOX).content.decode())

    # The same rows shown to an auditor have no controls: a version is never another's.
    answer = poll(client_for(auditor), operators_version)

    assert answer.status_code == 200
    assert "Claim</button>" not in answer.content.decode()


@pytest.mark.django_db
def test_a_poll_without_a_session_is_sent_to_log_in_whatever_version_it_sends(client):
    answer = poll(client, "0" * 24)

    assert answer.status_code == 200
    assert answer["HX-Redirect"] == f"{reverse('login')}?next=/review/"
