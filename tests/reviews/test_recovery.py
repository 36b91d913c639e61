"""The recovery panel at HTTP level: four blocks, options with previews, and every intervention or
confirmation recorded as one Decision in the same transaction as the change it made."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from agentops.models import Event, ToolCall
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from reviews.models import Decision
from tests.builders import run_until_parked_or_done
from tests.factories import stopped_trip_row
from tests.reviews.builders import client_for, effects, stopped_trip, unknown_refund

pytestmark = pytest.mark.django_db


def intervene(client: Any, task_id: int, action: str, reason: str = "") -> Any:
    return client.post(
        reverse("reviews:intervention", args=[task_id]),
        {"action": action, "reason": reason, "confirmed": "True"},
    )


def test_the_panel_shows_four_blocks_first_then_the_options_with_their_consequences(
    sim, redis_clean, operator, starter
):
    task = stopped_trip(created_by=starter, goal="Trip to Lisbon for the offsite")

    response = client_for(operator).get(reverse("reviews:recover", args=[task.pk]))

    page = response.content.decode()
    assert response.status_code == 200
    blocks = [page.index(f'id="{name}-heading"') for name in ("goal", "breakpoint", "failure")]
    blocks.append(page.index('id="recommended-heading"'))
    assert blocks == sorted(blocks) and blocks[-1] < page.index('id="options-heading"')
    assert "Trip to Lisbon for the offsite" in page
    assert "Step 3 of 4" in page
    assert "authorization_gap" in page and "hotels.book refused: 403" in page
    options = re.findall(r'name="action" value="(\w+)"', page)
    assert options == ["retry", "skip", "rollback", "abort"]
    rollback = page[page.index('id="option-rollback-heading"') :]
    assert (
        "Undoes, in order" in rollback[:1500]
        and '<code translate="no">book_flight</code>' in rollback[:1500]
    )
    assert page.index('id="options-heading"') < page.index("<summary>Timeline")
    assert page.count("<details>") == 4


def test_rollback_from_the_panel_is_logged_and_cancels_the_flight_once(
    sim, redis_clean, operator, starter
):
    task = stopped_trip(created_by=starter)

    response = intervene(client_for(operator), task.pk, "rollback", "customer cancelled")

    assert response.status_code == 302
    assert response["Location"] == reverse("agentops:task_detail", args=[task.pk])
    decision = Decision.objects.get()
    assert decision.action == "reviews.intervention.rollback"
    assert decision.actor_label == "olga" and decision.reason == "customer cancelled"
    assert decision.task_id_ref == task.pk and decision.detail["advisor_rule"]
    assert "Undoes book_flight" in decision.detail["preview"]
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.ROLLED_BACK
    assert effects("flights", "cancel") == 1


@pytest.mark.parametrize(
    ("action", "status"),
    [
        ("retry", TaskStatus.QUEUED),
        ("skip", TaskStatus.QUEUED),
        ("abort", TaskStatus.ABORTED),
    ],
)
def test_each_intervention_writes_one_decision(sim, redis_clean, operator, starter, action, status):
    task = stopped_trip(created_by=starter)

    response = intervene(client_for(operator), task.pk, action)

    assert response.status_code == 302
    task.refresh_from_db()
    assert task.status == status
    assert list(Decision.objects.values_list("action", flat=True)) == [
        f"reviews.intervention.{action}"
    ]
    resumed = Event.objects.filter(task=task, actor=operator).values_list("action", flat=True)
    assert resumed.exists()
    if action == "skip":
        assert task.steps.get(ordinal=2).status == StepStatus.SKIPPED


def test_a_second_intervention_gets_409_and_no_decision(
    sim, redis_clean, operator, operator2, starter
):
    task = stopped_trip(created_by=starter)
    assert intervene(client_for(operator), task.pk, "abort").status_code == 302

    late = intervene(client_for(operator2), task.pk, "retry")

    assert late.status_code == 409
    assert "nothing to recover" in late.content.decode()
    assert Decision.objects.count() == 1
    task.refresh_from_db()
    assert task.status == TaskStatus.ABORTED


def test_an_option_the_advisor_does_not_offer_is_refused(
    sim, redis_clean, operator, starter, settings
):
    task = unknown_refund(settings, created_by=starter)

    response = intervene(client_for(operator), task.pk, "retry")

    assert response.status_code == 400
    assert "not an option for this task now" in response.content.decode()
    assert not Decision.objects.exists()
    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION


def test_an_unknown_call_shows_its_history_and_is_confirmed_once(
    sim, redis_clean, operator, operator2, starter, settings
):
    task = unknown_refund(settings, created_by=starter)
    call = ToolCall.objects.get(task=task, tool="issue_refund_legacy")
    client = client_for(operator)

    page = client.get(reverse("reviews:recover", args=[task.pk])).content.decode()
    assert "Did this call happen?" in page and call.idempotency_key in page
    assert "agentops.ledger.pending" in page and "agentops.ledger.executed_unknown" in page
    assert "cannot tell" in page
    assert re.findall(r'name="action" value="(\w+)"', page) == ["abort"]

    url = reverse("reviews:call_confirm", args=[task.pk, call.pk])
    response = client.post(url, {"executed": "yes", "reason": "seen in the PSP"})

    assert response.status_code == 302
    decision = Decision.objects.get()
    assert decision.action == "reviews.ledger.confirmed"
    assert decision.detail["executed"] is True and decision.reason == "seen in the PSP"
    assert decision.before_digest == call.args_digest
    again = client_for(operator2).post(url, {"executed": "no"})
    assert again.status_code == 409
    assert Decision.objects.count() == 1
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    call.refresh_from_db()
    assert call.status == LedgerStatus.SUCCEEDED
    assert effects("payments", "refund_legacy") == 1


@pytest.mark.parametrize(
    ("action", "line"),
    [("retry", "the step is retried"), ("skip", "is skipped"), ("rollback", "rolling back")],
)
def test_an_intervention_confirms_what_it_did_with_a_message(
    sim, redis_clean, operator, starter, action, line
):
    task = stopped_trip(created_by=starter)

    response = intervene(client_for(operator), task.pk, action)

    assert response.status_code == 302
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert len(shown) == 1 and f"Task #{task.pk}" in shown[0] and line in shown[0]


def test_did_not_happen_on_a_tool_that_ignores_keys_says_so_and_asks_to_be_sure(
    sim, redis_clean, operator, starter, settings
):
    # issue_refund_legacy does not honour idempotency keys: a second call may refund twice.
    task = unknown_refund(settings, created_by=starter)
    call = ToolCall.objects.get(task=task, tool="issue_refund_legacy")
    client = client_for(operator)

    page = client.get(reverse("reviews:recover", args=[task.pk])).content.decode()
    assert "does not honour idempotency keys" in page and 'name="sure"' in page
    assert "again with the same key" not in page

    url = reverse("reviews:call_confirm", args=[task.pk, call.pk])
    refused = client.post(url, {"executed": "no"})
    assert refused.status_code == 400
    assert "not protected by a key" in refused.content.decode()
    assert not Decision.objects.exists()
    call.refresh_from_db()
    assert call.status == LedgerStatus.EXECUTED_UNKNOWN

    assert client.post(url, {"executed": "no", "sure": "on"}).status_code == 302
    assert Decision.objects.get().detail["executed"] is False


def test_a_call_of_another_task_is_not_found(sim, redis_clean, operator, starter, settings):
    unknown = unknown_refund(settings, created_by=starter)
    other = stopped_trip(created_by=starter)
    call = ToolCall.objects.get(task=unknown, tool="issue_refund_legacy")

    response = client_for(operator).post(
        reverse("reviews:call_confirm", args=[other.pk, call.pk]), {"executed": "yes"}
    )

    assert response.status_code == 404
    assert not Decision.objects.exists()


def test_an_auditor_reads_the_panel_but_cannot_intervene(redis_clean, auditor, starter):
    task = stopped_trip_row(created_by=starter)
    client = client_for(auditor)

    page = client.get(reverse("reviews:recover", args=[task.pk])).content.decode()
    response = intervene(client, task.pk, "abort")

    assert "Read-only: only operators resolve stopped tasks" in page
    assert 'name="action"' not in page
    assert response.status_code == 403
    assert not Decision.objects.exists()
    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION


def test_rollback_and_abort_ask_again_with_the_preview_before_anything_changes(
    sim, redis_clean, operator, starter
):
    task = stopped_trip(created_by=starter)
    client = client_for(operator)

    response = client.post(
        reverse("reviews:intervention", args=[task.pk]),
        {"action": "rollback", "reason": "customer cancelled"},
    )

    page = response.content.decode()
    assert response.status_code == 200
    confirm = page[page.index('id="confirm-step"') :][:1500]
    assert (
        "Confirm rollback" in confirm
        and 'Undoes <span translate="no">book_flight</span>' in confirm
    )
    assert 'name="reason" value="customer cancelled"' in confirm
    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION and not Decision.objects.exists()
    assert intervene(client, task.pk, "rollback", "customer cancelled").status_code == 302
    assert Decision.objects.get().reason == "customer cancelled"
