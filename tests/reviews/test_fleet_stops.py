"""The fleet's stop button in one process: who may press it, what a stop pauses and holds, its
decisions, the safe point before a tool's calls, the banner, the page and the API. The same with
real workers, under load, is tests/agentops/test_fleet_stops.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from agentops.engine import StopConflict, StopRefused, task_control
from agentops.engine.leases import Heartbeat
from agentops.engine.runner import TaskRun, http_client
from agentops.engine.sweeper import tasks_to_redrive
from agentops.engine.transitions import task_claim, task_claim_row
from agentops.models import Event, FleetStop, Task, ToolCall
from agentops.states import StepStatus, TaskStatus
from agentops.tokens import api_token_create
from reviews.models import Decision
from reviews.services import NotAllowed
from reviews.services.stops import fleet_resume_apply, fleet_stop_apply
from tests.builders import refund, run_until_parked_or_done
from tests.reviews.builders import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def stopper(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("stella")
    user.user_permissions.add(Permission.objects.get(codename="stop_fleet"))
    return django_user_model.objects.get(pk=user.pk)


def trip() -> Task:
    from agentops.engine import task_create

    return task_create(
        agent="trip",
        goal="Book a trip to Rome",
        input={"traveller": "Ada Lovelace", "destination": "FCO", "date": "2026-12-17"},
    )


def test_only_a_holder_of_the_permission_may_stop_or_resume(operator, stopper):
    with pytest.raises(NotAllowed):
        fleet_stop_apply(scope="all", reason="no", actor=operator)
    made = fleet_stop_apply(scope="all", reason="incident 42", actor=stopper)
    with pytest.raises(NotAllowed):
        fleet_resume_apply(stop_id=made.stop.pk, actor=operator)
    assert FleetStop.objects.get().lifted_at is None
    assert Decision.objects.filter(action__startswith="reviews.fleet").count() == 1


def test_a_stop_of_an_agent_pauses_its_waiting_tasks_and_its_claims_alone(stopper):
    refunds = [refund(), refund(order_id="A1002")]
    other = trip()

    made = fleet_stop_apply(scope="agent", target="refund", reason="bad refunds", actor=stopper)

    assert made.paused == [t.pk for t in refunds] and made.running == []
    assert set(Task.objects.filter(agent="refund").values_list("status", flat=True)) == {
        TaskStatus.PAUSED
    }
    pauses = Event.objects.filter(action="agentops.task.paused", task__agent="refund")
    assert [e.payload["stop"] for e in pauses] == [made.stop.pk] * 2
    # A refund created while the stop is in force is held at its claim; the trip is not.
    late = refund(order_id="A1003")
    assert task_claim(task_id=late.pk, owner="test") is None
    assert task_claim(task_id=other.pk, owner="test") is not None
    decision = Decision.objects.get(action="reviews.fleet.stopped")
    assert decision.reason == "bad refunds"
    assert decision.detail == {
        "stop": made.stop.pk,
        "scope": "agent",
        "target": "refund",
        "paused": made.paused,
        "running": [],
    }


def test_the_sweeper_leaves_a_held_task_and_takes_it_again_once_the_stop_is_lifted(stopper):
    made = fleet_stop_apply(scope="all", reason="incident", actor=stopper)
    held = refund()
    Task.objects.filter(pk=held.pk).update(updated_at="2000-01-01T00:00:00Z")
    assert held.pk not in dict(tasks_to_redrive())

    lifted = fleet_resume_apply(stop_id=made.stop.pk, reason="fixed", actor=stopper)

    assert lifted.released == [held.pk] and lifted.resumed == []
    assert held.pk in dict(tasks_to_redrive())
    assert task_claim(task_id=held.pk, owner="test") is not None


def test_lifting_a_stop_resumes_what_it_paused_and_leaves_a_task_a_person_paused(operator, stopper):
    mine, theirs = refund(), refund(order_id="A1002")
    task_control(task_id=theirs.pk, action="pause", actor=operator, reason="checking")
    made = fleet_stop_apply(scope="all", reason="incident", actor=stopper)
    assert made.paused == [mine.pk]

    lifted = fleet_resume_apply(stop_id=made.stop.pk, reason="all clear", actor=stopper)

    assert lifted.resumed == [mine.pk]
    assert Task.objects.get(pk=mine.pk).status == TaskStatus.QUEUED
    assert Task.objects.get(pk=theirs.pk).status == TaskStatus.PAUSED
    decision = Decision.objects.get(action="reviews.fleet.resumed")
    assert decision.detail["resumed"] == [mine.pk]
    assert decision.reason == "all clear"
    with pytest.raises(StopConflict):
        fleet_resume_apply(stop_id=made.stop.pk, actor=stopper)


def test_a_stop_is_refused_without_a_reason_for_an_unknown_name_and_twice(stopper):
    with pytest.raises(StopRefused, match="reason"):
        fleet_stop_apply(scope="all", reason="  ", actor=stopper)
    with pytest.raises(StopRefused, match="no agent is named 'nobody'"):
        fleet_stop_apply(scope="agent", target="nobody", reason="x", actor=stopper)
    with pytest.raises(StopRefused, match="unknown scope"):
        fleet_stop_apply(scope="everything", reason="x", actor=stopper)
    fleet_stop_apply(scope="tool", target="issue_refund", reason="x", actor=stopper)
    with pytest.raises(StopConflict):
        fleet_stop_apply(scope="tool", target="issue_refund", reason="again", actor=stopper)
    assert FleetStop.objects.count() == 1
    assert Decision.objects.filter(action="reviews.fleet.stopped").count() == 1


def test_a_tool_stop_pauses_a_task_before_that_tools_call_and_the_model_is_not_asked_again(
    sim, redis_clean, stopper
):
    task = refund()
    made = fleet_stop_apply(
        scope="tool", target="issue_refund", reason="hold refunds", actor=stopper
    )
    assert made.paused == []

    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.PAUSED
    steps = list(task.steps.order_by("ordinal"))
    assert [s.status for s in steps[:3]] == [StepStatus.SUCCEEDED] * 3
    halted = Event.objects.get(task=task, action="agentops.step.halted")
    assert halted.step_ordinal == 3
    assert halted.payload == {
        "stop": made.stop.pk,
        "phase": "before_tool_call",
        "tool": "issue_refund",
    }
    assert steps[3].model_response is not None  # the proposal is kept
    assert steps[3].attempts == 0  # a halt is no failed try
    assert not ToolCall.objects.filter(task=task, tool="issue_refund").exists()
    # Stopped again at the same step: issue_refund allows two tries, and neither was used.
    fleet_resume_apply(stop_id=made.stop.pk, actor=stopper)
    again = fleet_stop_apply(scope="tool", target="issue_refund", reason="still", actor=stopper)
    assert run_until_parked_or_done(task).status == TaskStatus.PAUSED
    assert task.steps.get(ordinal=3).attempts == 0

    fleet_resume_apply(stop_id=again.stop.pk, actor=stopper)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    asked = Event.objects.filter(task=task, action="agentops.step.model_result")
    assert sorted(asked.values_list("step_ordinal", flat=True)) == [0, 1, 2, 3, 4]
    assert ToolCall.objects.filter(task=task, tool="issue_refund").count() == 1


def test_a_running_task_under_a_stop_pauses_at_its_next_safe_point_before_the_model_call(
    sim, redis_clean, stopper
):
    """A task its worker holds is not paused from outside (its call in flight would go
    unrecorded): the worker meets the stop at its next safe point and pauses the task there."""
    task = refund()
    claimed = task_claim_row(task_id=task.pk, owner="early")
    assert claimed is not None
    made = fleet_stop_apply(scope="all", reason="incident", actor=stopper)
    assert made.running == [task.pk] and made.paused == []
    assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING

    lease, row = claimed
    with Heartbeat(lease, armed=False) as beat:
        outcome = TaskRun(lease=lease, http=http_client(), beat=beat, task=row).advance()

    assert outcome == "halted by a stop"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.PAUSED
    halted = Event.objects.get(task=task, action="agentops.step.halted")
    assert halted.payload == {"stop": made.stop.pk, "phase": "before_model_call"}
    assert not Event.objects.filter(task=task, action="agentops.step.model_result").exists()
    assert fleet_resume_apply(stop_id=made.stop.pk, actor=stopper).resumed == [task.pk]
    assert run_until_parked_or_done(task).status == TaskStatus.SUCCEEDED


def test_every_page_shows_the_stops_in_force_and_the_holder_a_way_to_them(operator, stopper):
    fleet_stop_apply(
        scope="agent", target="refund", reason="<b>refunds</b> look wrong", actor=stopper
    )

    page = client_for(operator).get(reverse("agentops:task_list")).content.decode()
    assert 'Every task of agent <span translate="no">refund</span>' in page
    assert "&lt;b&gt;refunds&lt;/b&gt; look wrong" in page
    assert reverse("reviews:fleet_stops") not in page
    held = client_for(stopper).get(reverse("agentops:task_list")).content.decode()
    assert reverse("reviews:fleet_stops") in held
    # Not to anonymous visitors: the login page says nothing of it.
    login = Client().get(reverse("login")).content.decode()
    assert "look wrong" not in login and "A stop is in force" not in login


def test_the_page_stops_and_resumes_for_the_holder_alone(operator, stopper):
    url = reverse("reviews:fleet_stops")
    refused_page = client_for(operator).get(url)
    assert refused_page.status_code == 403
    # The refusal says what is missing, not a group that would not grant it.
    assert "Only holders of the stop permission" in refused_page.content.decode()
    assert client_for(operator).post(url, {"what": "all:", "reason": "x"}).status_code == 403
    client = client_for(stopper)
    refused = client.post(url, {"what": "agent:nobody", "reason": "x"})
    assert refused.status_code == 400
    assert client.post(url, {"what": "agent:refund", "reason": ""}).status_code == 400
    assert FleetStop.objects.count() == 0

    made = client.post(url, {"what": "agent:refund", "reason": "incident 7"})

    assert made.status_code == 302
    stop = FleetStop.objects.get()
    assert (stop.scope, stop.target, stop.reason) == ("agent", "refund", "incident 7")
    page = client.get(url).content.decode()
    assert reverse("reviews:fleet_resume", args=[stop.pk]) in page
    assert (
        client_for(operator).post(reverse("reviews:fleet_resume", args=[stop.pk])).status_code
        == 403
    )
    resumed = client.post(reverse("reviews:fleet_resume", args=[stop.pk]), {"reason": "ok"})
    assert resumed.status_code == 302
    stop.refresh_from_db()
    assert stop.lifted_at is not None and stop.lift_reason == "ok"
    decisions = Decision.objects.filter(action__startswith="reviews.fleet").order_by("id")
    assert [(d.action, d.channel) for d in decisions] == [
        ("reviews.fleet.stopped", "browser"),
        ("reviews.fleet.resumed", "browser"),
    ]


def api(user: Any) -> Client:
    _, token = api_token_create(user=user, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_api_stops_lists_and_resumes_with_its_errors(operator, stopper):
    task = refund()
    assert (
        api(operator)
        .post("/api/v1/stops", {"scope": "all", "reason": "x"}, content_type="application/json")
        .status_code
        == 403
    )
    client = api(stopper)
    bad = client.post(
        "/api/v1/stops",
        {"scope": "agent", "target": "nobody", "reason": "x"},
        content_type="application/json",
    )
    assert bad.status_code == 400

    made = client.post(
        "/api/v1/stops", {"scope": "all", "reason": "incident"}, content_type="application/json"
    )

    assert made.status_code == 201
    body = made.json()
    assert body["paused"] == [task.pk] and body["stop"]["in_force"] is True
    again = client.post(
        "/api/v1/stops", {"scope": "all", "reason": "again"}, content_type="application/json"
    )
    assert again.status_code == 409
    listed = client.get("/api/v1/stops").json()
    assert [s["id"] for s in listed] == [body["stop"]["id"]]
    stop_id = body["stop"]["id"]
    resumed = client.post(f"/api/v1/stops/{stop_id}/resume", {}, content_type="application/json")
    assert resumed.status_code == 200
    assert resumed.json()["resumed"] == [task.pk]
    assert (
        client.post(
            f"/api/v1/stops/{stop_id}/resume", {}, content_type="application/json"
        ).status_code
        == 409
    )
    assert (
        client.post("/api/v1/stops/999999/resume", {}, content_type="application/json").status_code
        == 404
    )
    channels = Decision.objects.filter(action__startswith="reviews.fleet").values_list(
        "channel", flat=True
    )
    assert list(channels) == ["api", "api"]
