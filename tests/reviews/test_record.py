"""The review record never misreports (issue 10, items 1-8): what was proposed, approved and run;
the dry-run's view of edited actions; agents reading executed effects; one audit row per executed
call; compensated steps; where a task really stopped; retries that failed again; reject and stop."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create
from agentops.models import AuditItem, Gate, Step, Task, ToolCall
from agentops.policy_hooks import recorded_actions
from agentops.selectors import task_get_detail
from agentops.states import GateStatus, TaskStatus
from reviews.models import Decision
from reviews.services import gate_reject, ledger_call_confirm
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import (
    client_for,
    effects,
    gated_refund,
    open_gate,
    stopped_trip,
    unknown_refund,
)

pytestmark = pytest.mark.django_db


def edit(client: Any, gate: Gate, arguments: str, **extra: Any) -> Any:
    return client.post(
        reverse("reviews:gate_edit", args=[gate.pk]),
        {"seen_digest": gate.args_digest, "arguments": arguments, **extra},
    )


EDITED = '{"order_id": "B2002", "amount": 90, "currency": "EUR"}'


def test_edit_and_approve_records_proposed_approved_diff_and_what_the_ledger_ran(
    sim, redis_clean, operator, starter
):
    gate = open_gate(gated_refund(created_by=starter))
    client = client_for(operator)

    assert edit(client, gate, EDITED, reason="manager cap").status_code == 302
    task = run_until_parked_or_done(gate.task)

    assert task.status == TaskStatus.SUCCEEDED
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and gate.edited is True
    assert gate.arguments["amount"] == 108.0
    assert gate.approved_arguments == {"order_id": "B2002", "amount": 90, "currency": "EUR"}
    refund = ToolCall.objects.get(task=task, tool="issue_refund")
    assert refund.args["amount"] == 90 and refund.args_digest == gate.approved_digest
    decision = Decision.objects.get(action="reviews.gate.edited")
    assert decision.before_digest == gate.args_digest
    assert decision.after_digest == gate.approved_digest
    assert decision.detail["proposed"]["amount"] == 108.0

    page = client.get(reverse("reviews:gate", args=[gate.pk])).content.decode()
    record = page[page.index('id="decision-record"') :]
    assert '<strong>yes</strong>, by <span translate="no">olga</span>' in record
    assert '<del translate="no">108.0</del>' in record and '<ins translate="no">90</ins>' in record
    assert gate.approved_digest in record and refund.idempotency_key in record
    assert "&quot;amount&quot;: 90" in record[record.index('id="executed-arguments"') :]
    assert "no, as the model proposed" not in page
    # A decided gate reads as decided (item 18).
    assert "nothing has been sent" not in page and "Nobody holds this" not in page
    assert "decided: approved; the ledger ran it (succeeded)" in page


def test_the_dry_run_history_judges_an_edited_action_by_its_executed_arguments(
    sim, redis_clean, operator, starter
):
    gate = open_gate(gated_refund(created_by=starter))
    edit(client_for(operator), gate, EDITED)
    run_until_parked_or_done(gate.task)

    actions = {
        r.action.tool: r.action
        for r in recorded_actions(timezone.now() - timedelta(hours=1))
        if r.action.tool == "issue_refund"
    }

    assert actions["issue_refund"].amount == 90
    assert actions["issue_refund"].edited is True


def test_the_refund_email_states_the_amount_the_ledger_refunded(
    sim, redis_clean, operator, starter
):
    gate = open_gate(gated_refund(created_by=starter))
    edit(client_for(operator), gate, EDITED)
    run_until_parked_or_done(gate.task)

    email = Effect.objects.get(operation="send")
    assert "We refunded 90 EUR" in email.request["body"]
    assert Effect.objects.get(operation="refund").request["amount"] == 90


def test_a_reissued_legacy_call_keeps_one_truthful_audit_row(
    sim, redis_clean, operator, starter, settings
):
    task = unknown_refund(settings, created_by=starter)
    call = ToolCall.objects.get(task=task, tool="issue_refund_legacy")
    assert AuditItem.objects.filter(task=task, tool="issue_refund_legacy").count() == 1

    ledger_call_confirm(task_id=task.pk, call_id=call.pk, executed=False, actor=operator)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    items = AuditItem.objects.filter(task=task, tool="issue_refund_legacy")
    assert items.count() == 1
    live = ToolCall.objects.get(task=task, tool="issue_refund_legacy", status="succeeded")
    assert items.get().tool_call_id == live.pk


def test_a_rolled_back_step_reads_compensated_on_the_task_page_and_list(
    sim, redis_clean, operator, starter
):
    task = stopped_trip(created_by=starter)
    client = client_for(operator)
    client.post(
        reverse("reviews:intervention", args=[task.pk]), {"action": "rollback", "confirmed": "True"}
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.ROLLED_BACK

    detail = task_get_detail(task_id=task.pk, viewer=operator)
    flight = next(r.step for r in detail.steps if r.step.title == "Book the flight")
    assert flight.compensated is True
    page = client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()
    steps = page[page.index('id="steps-heading"') : page.index('id="ledger-heading"')]
    assert steps.count("badge-compensated") == 1
    listing = client.get(reverse("agentops:task_list")).content.decode()
    assert "1 compensated" in listing


def test_the_breakpoint_says_the_call_ran_and_was_refused(sim, redis_clean, operator, starter):
    task = stopped_trip(created_by=starter)

    page = client_for(operator).get(reverse("reviews:recover", args=[task.pk])).content.decode()

    kind = '<span translate="no">authorization gap</span>'
    assert f"after the tool call: the service refused it ({kind})" in page
    assert "before tool call" not in page.lower().replace("before the tool call", "")


def test_a_second_failed_retry_changes_the_recommendation_and_counts_every_attempt(
    sim, redis_clean, operator, starter
):
    task = stopped_trip(created_by=starter)
    # The hotel keeps refusing: both manual retries fail the same way.
    fault_set(service="hotels", operation="book", mode="forbidden", count=2)
    client = client_for(operator)
    page = client.get(reverse("reviews:recover", args=[task.pk])).content.decode()
    assert "badge-recommended" in page[page.index('id="option-retry-heading"') :][:300]

    for _ in range(2):
        response = client.post(reverse("reviews:intervention", args=[task.pk]), {"action": "retry"})
        assert response.status_code == 302
        task = run_until_parked_or_done(task)
        assert task.status == TaskStatus.NEEDS_ATTENTION

    page = client.get(reverse("reviews:recover", args=[task.pk])).content.decode()
    recommended = page[page.index('id="recommended-heading"') :][:800]
    assert "Retry" not in recommended and "already failed the same way" in recommended
    assert "3 attempts in all" in page and "2 manual retries failed the same way" in page
    history = page[page.index('id="intervention-history"') :]
    assert history.count("failed again: authorization gap") == 2
    assert history.count("olga") >= 2


def stop(client: Any, gate: Gate, outcome: str, **extra: Any) -> Any:
    data = {
        "seen_digest": gate.args_digest,
        "outcome": outcome,
        "reason": "customer withdrew the claim",
        "confirm": "on",
        **extra,
    }
    return client.post(reverse("reviews:gate_reject_stop", args=[gate.pk]), data)


def test_reject_and_stop_aborts_the_task_and_keeps_effects(sim, redis_clean, operator, starter):
    gate = open_gate(gated_refund(created_by=starter))
    client = client_for(operator)
    page = client.get(reverse("reviews:gate", args=[gate.pk])).content.decode()
    assert 'id="stop-preview-abort"' in page and 'id="stop-preview-rollback"' in page

    assert stop(client, gate, "abort", confirm="").status_code == 400
    assert stop(client, gate, "abort").status_code == 302
    again = stop(client, gate, "abort")

    assert again.status_code == 409
    task = Task.objects.get(pk=gate.task_id)
    gate.refresh_from_db()
    assert task.status == TaskStatus.ABORTED
    assert gate.status == GateStatus.REJECTED and gate.stopped_with == "abort"
    decision = Decision.objects.get()
    assert decision.action == "reviews.gate.rejected_and_stopped"
    assert decision.detail["outcome"] == "abort"
    assert effects("payments", "refund") == 0


def test_reject_and_stop_with_rollback_undoes_the_effects(sim, redis_clean, operator, starter):
    trip = task_create(
        agent="trip",
        goal="Trip, hotel needs approval",
        input={"traveller": "Ada", "hotel_amount": 900.0},
        created_by=starter,
    )
    trip = run_until_parked_or_done(trip)
    assert trip.status == TaskStatus.AWAITING_APPROVAL
    gate = open_gate(trip)

    assert stop(client_for(operator), gate, "rollback").status_code == 302
    trip = run_until_parked_or_done(trip)

    assert trip.status == TaskStatus.ROLLED_BACK
    assert effects("flights", "book") == 1 and effects("flights", "cancel") == 1
    assert effects("hotels", "book") == 0


def test_the_same_action_rejected_twice_holds_the_task_for_a_person(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    first = open_gate(task)
    gate_reject(gate_id=first.pk, actor=operator, seen_digest=None, feedback="not now")
    task = run_until_parked_or_done(task)
    second = open_gate(task)
    assert second.args_digest == first.args_digest

    gate_reject(gate_id=second.pk, actor=operator, seen_digest=None, feedback="still no")

    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "planning_loop" and "rejected 2 times" in task.failure["message"]
    step = Step.objects.get(task=task, ordinal=3)
    assert step.spec["rejections"] == {first.args_digest: 2}
    page = client_for(operator).get(reverse("reviews:recover", args=[task.pk])).content.decode()
    assert "nothing to recover" not in page and 'name="action" value="abort"' in page
    assert Gate.objects.filter(task=task, status=GateStatus.OPEN).count() == 0


def test_after_reviewers_rejected_twice_the_advisor_does_not_recommend_retry(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    gate_reject(gate_id=open_gate(task).pk, actor=operator, seen_digest=None, feedback="stop")
    task = run_until_parked_or_done(task)
    gate_reject(gate_id=open_gate(task).pk, actor=operator, seen_digest=None, feedback="stop")

    recovery = task_get_detail(task_id=task.pk, viewer=operator).recovery

    assert recovery is not None
    assert recovery.recommendation.action != "retry"
    assert recovery.recommendation.rule.startswith("people-rejected")


def test_the_gate_shows_its_checks_against_earlier_results_before_the_arguments(
    sim, redis_clean, operator, starter
):
    within = open_gate(gated_refund(created_by=starter))
    above = open_gate(gated_refund(created_by=starter, order_id="E5005", amount=5000))
    client = client_for(operator)

    page = client.get(reverse("reviews:gate", args=[within.pk])).content.decode()
    evidence = page[page.index('id="evidence"') :][:1500]
    assert page.index('id="evidence"') < page.index('<pre class="json" translate="no">')
    # The checks' names and messages are the policy's words: kept as written.
    assert '<strong>Passed</strong>: <span translate="no">Amount ≤ the eligibility' in evidence
    assert "108.0 is within the eligible maximum of 108.0" in evidence
    assert (
        '<strong>Passed</strong>: <span translate="no">Order consistent with the claim' in evidence
    )
    other = client.get(reverse("reviews:gate", args=[above.pk])).content.decode()
    assert '<strong>Failed</strong>: <span translate="no">Amount ≤ the eligibility' in other
    assert "5000 is above the eligible maximum" in other


def test_an_artifact_opens_as_inert_text_for_readers_of_its_task(
    sim, redis_clean, operator, starter, auditor, policy_admin
):
    from agentops.engine.jsonvalues import ARTIFACT_KEY, offloaded

    task = gated_refund(created_by=starter)
    pointer = offloaded(
        {ARTIFACT_KEY: 1, "x": "<script>alert(1)</script>"}, path="t", task_id=task.pk
    )
    url = reverse("agentops:artifact", args=[pointer[ARTIFACT_KEY]])

    response = client_for(auditor).get(url)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert b"<script>alert(1)</script>" in b"".join(response.streaming_content)
    assert client_for(policy_admin).get(url).status_code == 404
