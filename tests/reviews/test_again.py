"""Start again and fork from a step (issue 24, items 7 and 4): a new task from an old one, linked
both ways, as an operator's decision; a fork references the results of the steps before its
fork point (nothing of them runs again at the simulated services) and runs on from it.

Tasks are run by the real runner against the in-process simulated services (rollback-isolated);
the people act through the services, the views (roles, CSRF) and the API.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse
from django.utils.html import escape
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Task
from agentops.states import StepStatus, TaskStatus
from agentops.tokens import api_token_create
from reviews.models import Decision
from reviews.services import NotAllowed, ReviewError, task_fork_apply, task_restart_apply
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import client_for, stopped_trip

pytestmark = pytest.mark.django_db


def done_refund(*, created_by: Any) -> Task:
    task = task_create(
        agent="refund",
        goal="Refund A1001",
        input={"order_id": "A1001", "reason": "damaged"},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    return task


def effects_of(task: Task) -> int:
    return Effect.objects.filter(request_key__startswith=f"t{task.pk}-").count()


# -- start again ----------------------------------------------------------------------------------


def test_a_stopped_task_is_aborted_and_started_again_with_the_edited_input_linked_both_ways(
    sim, redis_clean, operator, starter
):
    old = stopped_trip(created_by=starter)

    new = task_restart_apply(
        task_id=old.pk,
        actor=operator,
        ending="abort",
        reason="hotel refused; book under her full name",
        input={**old.input, "traveller": "Ada King"},
    )
    new = run_until_parked_or_done(new)

    old.refresh_from_db()
    assert old.status == TaskStatus.ABORTED
    assert (new.status, new.origin_id, new.origin_kind) == (TaskStatus.SUCCEEDED, old.pk, "restart")
    assert list(old.again.all()) == [new]
    assert (new.agent, new.goal, new.input["traveller"]) == (old.agent, old.goal, "Ada King")
    assert new.created_by == operator
    logged = Decision.objects.get(task_id_ref=old.pk, action="reviews.task.restarted")
    assert (logged.actor, logged.reason) == (operator, "hotel refused; book under her full name")
    assert logged.detail == {"new_task": new.pk, "ending": "abort", "input_edited": True}
    created = new.events.get(action="agentops.task.created").payload
    assert (created["origin"], created["origin_kind"]) == (old.pk, "restart")


def test_how_the_old_task_ends_must_fit_it_and_a_running_task_is_refused(
    sim, redis_clean, operator, starter
):
    stopped = stopped_trip(created_by=starter)
    finished = done_refund(created_by=starter)
    queued = task_create(agent="refund", goal="Refund A1001", input={"order_id": "A1001"})

    with pytest.raises(ReviewError, match="abort or cancel"):
        task_restart_apply(task_id=stopped.pk, actor=operator, ending="keep", reason="x")
    with pytest.raises(ReviewError, match="kept as it is"):
        task_restart_apply(task_id=finished.pk, actor=operator, ending="abort", reason="x")
    with pytest.raises(ReviewError, match="only a stopped or finished task"):
        task_restart_apply(task_id=queued.pk, actor=operator, ending="abort", reason="x")
    with pytest.raises(ReviewError, match="say why"):
        task_restart_apply(task_id=finished.pk, actor=operator, ending="keep", reason=" ")

    again = task_restart_apply(task_id=finished.pk, actor=operator, ending="keep", reason="again")
    cancelled = task_restart_apply(task_id=stopped.pk, actor=operator, ending="cancel", reason="c")

    finished.refresh_from_db()
    stopped.refresh_from_db()
    assert finished.status == TaskStatus.SUCCEEDED and again.origin_id == finished.pk
    assert stopped.status == TaskStatus.ABORTED and cancelled.origin_id == stopped.pk
    assert stopped.events.filter(action="agentops.task.aborted").exists() or stopped.events.exists()
    assert Task.objects.filter(origin__isnull=False).count() == 2


def test_only_operators_start_again_or_fork(sim, redis_clean, auditor, starter):
    task = done_refund(created_by=starter)

    with pytest.raises(NotAllowed):
        task_restart_apply(task_id=task.pk, actor=auditor, ending="keep", reason="x")
    with pytest.raises(NotAllowed):
        task_fork_apply(task_id=task.pk, actor=auditor, from_step=2, reason="x")
    assert not Task.objects.filter(origin=task).exists()


# -- fork from a step ------------------------------------------------------------------------------


def test_a_fork_references_the_steps_before_its_point_and_repeats_none_of_their_calls(
    sim, redis_clean, operator, starter
):
    old = done_refund(created_by=starter)
    calls_before = effects_of(old)

    new = task_fork_apply(
        task_id=old.pk, actor=operator, from_step=4, reason="resend the email", input=old.input
    )
    new = run_until_parked_or_done(new)

    steps = list(new.steps.order_by("ordinal"))
    old_steps = list(old.steps.order_by("ordinal"))
    assert new.status == TaskStatus.SUCCEEDED
    assert (new.origin_id, new.origin_kind, new.origin_step) == (old.pk, "fork", 4)
    assert [s.status for s in steps] == [StepStatus.SUCCEEDED] * 5
    assert [s.spec.get("adopted_from", {}).get("step") for s in steps[:4]] == [
        s.pk for s in old_steps[:4]
    ]
    assert [s.output for s in steps[:4]] == [s.output for s in old_steps[:4]]
    assert "adopted_from" not in steps[4].spec
    # Nothing of steps 1-4 was sent again; the email (step 5) was, once; no ledger row copied.
    assert [c.tool for c in new.tool_calls.order_by("id")] == ["email_customer"]
    email = new.tool_calls.get().idempotency_key
    made = Effect.objects.filter(request_key__startswith=f"t{new.pk}-")
    assert list(made.values_list("request_key", flat=True)) == [email]
    assert effects_of(old) == calls_before
    logged = Decision.objects.get(task_id_ref=old.pk, action="reviews.task.forked")
    assert logged.detail["new_task"] == new.pk and logged.detail["from_step"] == 5


def test_a_fork_point_needs_every_step_before_it_succeeded(sim, redis_clean, operator, starter):
    stopped = stopped_trip(created_by=starter)  # step 2 (the hotel) failed
    points = [s.ordinal for s in stopped.steps.order_by("ordinal") if s.status == "succeeded"]

    with pytest.raises(ReviewError, match="not a place to fork from"):
        task_fork_apply(task_id=stopped.pk, actor=operator, from_step=len(points) + 1, reason="x")
    fork = task_fork_apply(task_id=stopped.pk, actor=operator, from_step=len(points), reason="x")

    stopped.refresh_from_db()
    assert stopped.status == TaskStatus.NEEDS_ATTENTION  # the original is left as it is
    assert fork.steps.filter(status=StepStatus.SUCCEEDED).count() == len(points)


# -- views and API ---------------------------------------------------------------------------------


def test_the_task_page_offers_both_to_operators_and_shows_the_links_both_ways(
    sim, redis_clean, operator, auditor, starter
):
    old = done_refund(created_by=starter)
    url = reverse("reviews:task_fork", args=[old.pk])
    body = {"from_step": "4", "input": json.dumps(old.input), "reason": "resend"}

    no_token = client_for(operator, enforce_csrf_checks=True).post(url, body)
    reader = client_for(auditor).post(url, body)
    made = client_for(operator).post(url, body)

    assert [no_token.status_code, reader.status_code, made.status_code] == [403, 403, 302]
    new = Task.objects.get(origin=old)
    assert made["Location"] == reverse("agentops:task_detail", args=[new.pk])
    page_old = client_for(operator).get(reverse("agentops:task_detail", args=[old.pk])).content
    page_new = client_for(auditor).get(reverse("agentops:task_detail", args=[new.pk])).content
    assert f'Forked from step 5 as <a href="/tasks/{new.pk}">task #{new.pk}</a>' in (
        page_old.decode()
    )
    assert 'id="restart-form"' in page_old.decode() and 'id="fork-form"' in page_old.decode()
    assert f'Forked from <a href="/tasks/{old.pk}">task #{old.pk}</a> at step 5' in (
        page_new.decode()
    )
    assert 'id="referenced-ledger"' in page_new.decode()
    assert "restart-form" not in page_new.decode()  # an auditor gets the links, not the forms
    assert page_new.decode().count("not run again") >= 4


def test_a_bad_form_loses_nothing_and_says_why(sim, redis_clean, operator, starter):
    old = done_refund(created_by=starter)
    client = client_for(operator)

    bad_json = client.post(
        reverse("reviews:task_restart", args=[old.pk]),
        {"ending": "keep", "input": "{not json", "reason": "x"},
        follow=True,
    )
    wrong_ending = client.post(
        reverse("reviews:task_restart", args=[old.pk]),
        {"ending": "abort", "input": "{}", "reason": "x"},
        follow=True,
    )

    # Sent with htmx and no ending chosen: the form comes back in place, with the server's words.
    no_ending = client.post(
        reverse("reviews:task_restart", args=[old.pk]),
        {"input": '{"order_id": "A1001"}', "reason": "kept reason"},
        HTTP_HX_REQUEST="true",
    )

    assert [bad_json.status_code, wrong_ending.status_code] == [400, 400]
    assert "Nothing was started" in bad_json.content.decode()
    assert "{not json" in bad_json.content.decode()  # what was typed is kept
    assert "Nothing was started" in wrong_ending.content.decode()
    shown = no_ending.content.decode()
    assert no_ending.status_code == 200 and shown.lstrip().startswith("<form")
    assert 'id="restart_ending_error"' in shown and 'value="kept reason"' in shown
    assert "Choose what happens to the old task." in shown
    assert not Task.objects.filter(origin=old).exists()


def test_the_api_starts_again_and_forks_for_operators_only(
    sim, redis_clean, operator, auditor, starter
):
    old = done_refund(created_by=starter)
    _, olga = api_token_create(user=operator, name="t")
    _, audrey = api_token_create(user=auditor, name="t")

    def post(token: str, path: str, body: dict[str, Any]) -> Any:
        return client_for(operator).post(
            f"/api/v1/tasks/{old.pk}/{path}",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    refused = post(audrey, "fork", {"from_step": 5, "reason": "x"})
    bad = post(olga, "fork", {"from_step": 9, "reason": "x"})
    forked = post(olga, "fork", {"from_step": 5, "reason": "resend"})
    restarted = post(
        olga, "restart", {"ending": "keep", "reason": "again", "input": {"order_id": "A1001"}}
    )

    assert [refused.status_code, bad.status_code] == [403, 400]
    assert [forked.status_code, restarted.status_code] == [201, 201]
    assert Task.objects.get(pk=forked.json()["id"]).origin_step == 4
    assert Task.objects.get(pk=restarted.json()["id"]).input == {"order_id": "A1001"}
    channels = set(Decision.objects.filter(task_id_ref=old.pk).values_list("channel", flat=True))
    assert channels == {"api"}


@pytest.fixture
def operator_client(operator):
    """The operator signed in once for all of a property test's examples (its pages are reads)."""
    return client_for(operator)


texts = st.text(min_size=1, max_size=80).filter(lambda t: t.strip() and "\x00" not in t)


@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(value="<script>alert(1)</script>")
@example(value='" hx-get="/x')
@given(value=texts)
def test_any_edited_input_is_stored_as_given_and_rendered_as_text(
    sim, redis_clean, operator, starter, operator_client, value: str
):
    old = Task.objects.filter(agent="refund", status=TaskStatus.SUCCEEDED, origin=None).first()
    if old is None:
        old = done_refund(created_by=starter)

    new = task_restart_apply(
        task_id=old.pk,
        actor=operator,
        ending="keep",
        reason=value,
        input={"order_id": "A1001", "note": value},
    )
    page = operator_client.get(reverse("agentops:task_detail", args=[new.pk])).content.decode()
    old_page = operator_client.get(reverse("agentops:task_detail", args=[old.pk]))

    assert new.input["note"] == value or "[redacted" in str(new.input["note"])
    for html in (page, old_page.content.decode()):
        assert "<script>alert" not in html and 'hx-get="/x' not in html
    logged = Decision.objects.filter(action="reviews.task.restarted").latest("id")
    assert escape(logged.reason) in old_page.content.decode()
