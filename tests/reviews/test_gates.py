"""The gate panel at HTTP level: what it shows, and exactly one decision per gate.

Gates are opened by the real runner against the simulated services; decisions go through the
views, and the task is then advanced by the real runner to count what actually ran. Tests of what
the panel shows or refuses, after which nothing runs, start from a gate row (tests/factories.py).
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse

from agentops.models import Gate, Step, ToolCall
from agentops.states import GateStatus, LedgerStatus, TaskStatus
from reviews.models import Decision
from tests.builders import run_until_parked_or_done
from tests.factories import gated_refund_row
from tests.reviews.builders import client_for, effects, gated_refund, gated_trip, open_gate

pytestmark = pytest.mark.django_db


def approve(client: Any, gate: Gate, *, digest: str | None = None, reason: str = "") -> Any:
    return client.post(
        reverse("reviews:gate_approve", args=[gate.pk]),
        {"seen_digest": digest or gate.args_digest, "reason": reason},
    )


def test_a_trip_gated_on_a_fare_with_no_currency_renders_in_the_inbox_and_its_panel(
    sim, redis_clean, operator, auditor, starter
):
    gate = open_gate(gated_trip(created_by=starter))
    assert gate.arguments["amount"] == 472 and "currency" not in gate.arguments

    for user in (operator, auditor, starter):
        client = client_for(user)
        inbox = client.get(reverse("reviews:inbox"))
        poll = client.get(reverse("reviews:inbox"), HTTP_HX_REQUEST="true")
        panel = client.get(reverse("reviews:gate", args=[gate.pk]))

        assert [inbox.status_code, poll.status_code, panel.status_code] == [200, 200, 200]
        assert "book_flight</code> · €472.00" in poll.content.decode()
        assert "<strong>€472.00</strong>" in panel.content.decode()


def test_the_panel_shows_the_canonical_action_why_and_what_each_choice_does(
    redis_clean, operator, starter
):
    gate = open_gate(gated_refund_row(created_by=starter, goal="Refund B2002: never arrived"))

    response = client_for(operator).get(reverse("reviews:gate", args=[gate.pk]))

    assert response.status_code == 200
    page = response.content.decode()
    assert "Refund B2002: never arrived" in page
    assert "Step 4 of 5" in page
    assert gate.args_digest in page
    assert "&quot;amount&quot;: 108.0" in page and "&quot;order_id&quot;: &quot;B2002&quot;" in page
    assert f"v{gate.policy_version_number}" in page and "large payment" in page
    assert "Nothing can undo it automatically" in page
    assert "the agent gets your feedback in its next model call" in page
    assert "evaluated by the policy again" in page
    assert page.count('name="seen_digest"') == 4
    assert 'disabled aria-describedby="decide-refusal"' not in page


def test_approving_runs_the_call_once_and_the_task_completes(sim, redis_clean, operator, starter):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)

    response = approve(client_for(operator), gate, reason="customer is right")

    assert response.status_code == 302
    assert response["Location"] == reverse("reviews:gate", args=[gate.pk])
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and gate.decided_by == operator
    decision = Decision.objects.get()
    assert decision.action == "reviews.gate.approved"
    assert decision.actor_label == "olga" and decision.reason == "customer is right"
    assert decision.before_digest == gate.args_digest
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    assert effects("payments", "refund") == 1


def test_a_replayed_approval_gets_409_with_the_current_state_and_runs_nothing_twice(
    sim, redis_clean, operator, operator2, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    assert approve(client_for(operator), gate).status_code == 302

    replay = approve(client_for(operator), gate)
    other = approve(client_for(operator2), gate)

    assert replay.status_code == other.status_code == 409
    assert "already approved" in other.content.decode()
    assert 'by <span translate="no">olga</span>' in other.content.decode()
    assert Decision.objects.count() == 1
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    refunds = ToolCall.objects.filter(task=task, tool="issue_refund")
    assert [c.status for c in refunds] == [LedgerStatus.SUCCEEDED]
    assert effects("payments", "refund") == 1


# Two threads, two connections: each must see the other's committed decision.
@pytest.mark.django_db(transaction=True)
def test_two_operators_at_once_make_one_decision(
    sim_server, redis_clean, operator, operator2, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    clients = [client_for(operator), client_for(operator2)]
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def decide(client: Any) -> None:
        barrier.wait()
        try:
            statuses.append(approve(client, gate).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [302, 409]
    assert Decision.objects.filter(action="reviews.gate.approved").count() == 1
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    assert effects("payments", "refund") == 1


def test_the_creator_sees_disabled_buttons_and_a_forced_post_is_refused(redis_clean, starter):
    gate = open_gate(gated_refund_row(created_by=starter))
    client = client_for(starter)

    page = client.get(reverse("reviews:gate", args=[gate.pk])).content.decode()
    forced = approve(client, gate)
    rejected = client.post(
        reverse("reviews:gate_reject", args=[gate.pk]),
        {"seen_digest": gate.args_digest, "feedback": "no"},
    )

    assert "you started this task" in page
    assert page.count('disabled aria-describedby="decide-refusal"') == 4
    assert forced.status_code == rejected.status_code == 403
    assert "you started this task" in forced.content.decode()
    gate.refresh_from_db()
    assert gate.status == GateStatus.OPEN
    assert not Decision.objects.exists()


def test_a_stale_tab_409_links_to_the_gate_open_now(sim, redis_clean, operator, starter):
    task = gated_refund(created_by=starter)
    first = open_gate(task)
    client = client_for(operator)
    rejected = client.post(
        reverse("reviews:gate_reject", args=[first.pk]),
        {"seen_digest": first.args_digest, "feedback": "try again"},
    )
    assert rejected.status_code == 302
    second = open_gate(run_until_parked_or_done(task))

    stale = approve(client, first)

    assert stale.status_code == 409
    assert f'href="{reverse("reviews:gate", args=[second.pk])}"' in stale.content.decode()


def test_a_stale_seen_digest_gets_409_and_changes_nothing(redis_clean, operator, starter):
    gate = open_gate(gated_refund_row(created_by=starter))

    response = approve(client_for(operator), gate, digest="0" * 64)

    assert response.status_code == 409
    assert "changed since you opened it" in response.content.decode()
    gate.refresh_from_db()
    assert gate.status == GateStatus.OPEN
    assert not Decision.objects.exists()


def test_a_post_without_the_seen_digest_is_a_form_error(redis_clean, operator, starter):
    gate = open_gate(gated_refund_row(created_by=starter))

    response = client_for(operator).post(reverse("reviews:gate_approve", args=[gate.pk]), {})

    assert response.status_code == 400
    assert open_gate(gate.task) == gate
    assert not Decision.objects.exists()


def test_reject_needs_feedback_which_the_agent_gets_when_it_re_plans(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    client = client_for(operator)
    url = reverse("reviews:gate_reject", args=[gate.pk])

    empty = client.post(url, {"seen_digest": gate.args_digest, "feedback": "   "})
    assert empty.status_code == 400
    assert "re-plans from your feedback" in empty.content.decode()
    assert open_gate(task) == gate

    done = client.post(url, {"seen_digest": gate.args_digest, "feedback": "Refund 50 only"})

    assert done.status_code == 302
    gate.refresh_from_db()
    assert gate.status == GateStatus.REJECTED and gate.feedback == "Refund 50 only"
    decision = Decision.objects.get()
    assert decision.action == "reviews.gate.rejected" and decision.reason == "Refund 50 only"
    step = Step.objects.get(pk=gate.step_id)
    assert any("Refund 50 only" in note for note in step.spec["notes"])
    task = run_until_parked_or_done(task)
    # The scripted agent proposes the same refund again: a new gate, nothing paid meanwhile.
    assert task.status == TaskStatus.AWAITING_APPROVAL
    assert open_gate(task).pk != gate.pk
    assert effects("payments", "refund") == 0


def test_edit_and_approve_keeps_bad_input_and_re_evaluates_the_policy(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    client = client_for(operator)
    url = reverse("reviews:gate_edit", args=[gate.pk])

    def post(arguments: str) -> Any:
        return client.post(url, {"seen_digest": gate.args_digest, "arguments": arguments})

    broken = post('{"amount": 50,')
    assert broken.status_code == 400
    assert "The arguments are not valid JSON" in broken.content.decode()
    assert 'Nothing was decided. <a href="#edit-form">' in broken.content.decode()
    assert "{&quot;amount&quot;: 50," in broken.content.decode()
    not_object = post("[1, 2]")
    assert not_object.status_code == 400
    assert "must be a JSON object" in not_object.content.decode()
    unknown = post('{"order_id": "B2002", "amount": 50, "currency": "EUR", "note": "x"}')
    assert unknown.status_code == 400
    assert "unexpected arguments" in unknown.content.decode()
    assert open_gate(task) == gate and not Decision.objects.exists()

    edited = post('{"order_id": "B2002", "amount": 50, "currency": "EUR"}')

    assert edited.status_code == 302
    decision = Decision.objects.get()
    assert decision.action == "reviews.gate.edited"
    assert decision.before_digest == gate.args_digest != decision.after_digest
    task = run_until_parked_or_done(task)
    # 50 EUR is below the gate's limit: the edited action runs on the audit lane.
    assert task.status == TaskStatus.SUCCEEDED
    refund = ToolCall.objects.get(task=task, tool="issue_refund")
    assert refund.args["amount"] == 50 and refund.args_digest == decision.after_digest
    assert effects("payments", "refund") == 1


def test_an_edit_under_the_same_rule_runs_exactly_the_approved_arguments(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)

    response = client_for(operator).post(
        reverse("reviews:gate_edit", args=[gate.pk]),
        {
            "seen_digest": gate.args_digest,
            "arguments": '{"order_id": "B2002", "amount": 105, "currency": "EUR"}',
        },
    )

    assert response.status_code == 302
    task = run_until_parked_or_done(task)
    # Still the "large payment" rule, and the person approved exactly these arguments.
    assert task.status == TaskStatus.SUCCEEDED
    refund = ToolCall.objects.get(task=task, tool="issue_refund")
    assert refund.args["amount"] == 105
    assert refund.args_digest == Decision.objects.get().after_digest
    assert effects("payments", "refund") == 1


def test_bulk_approve_applies_item_by_item_with_a_result_per_gate(
    sim, redis_clean, operator, starter
):
    first = open_gate(gated_refund(created_by=starter, order_id="B2002"))
    second = open_gate(gated_refund(created_by=starter, order_id="E5005"))
    own = open_gate(gated_refund(created_by=operator, order_id="C3003"))
    decided = open_gate(gated_refund(created_by=starter, order_id="D4004"))
    client = client_for(operator)
    assert approve(client, decided).status_code == 302

    response = client.post(
        reverse("reviews:gates_bulk_approve"),
        {
            "gate": [f"{g.pk}:{g.args_digest}" for g in (first, second, own, decided)],
            "reason": "batch of large refunds",
        },
        follow=True,
    )

    # POST/redirect/GET: the results are shown by the inbox the POST redirects to, once.
    assert response.redirect_chain == [(reverse("reviews:inbox"), 302)]
    assert response.status_code == 200
    page = response.content.decode()
    results = dict(re.findall(r"Gate #(\d+)</a>:\s*<strong>([a-z ]+)</strong>", page))
    assert results == {
        str(first.pk): "approved",
        str(second.pk): "approved",
        str(own.pk): "not allowed",
        str(decided.pk): "already decided",
    }
    # A reload of the page shows the inbox, not the results again, and re-posts nothing.
    again = client.get(reverse("reviews:inbox"))
    assert "Bulk approval: one result per gate" not in again.content.decode()
    statuses = dict(Gate.objects.values_list("pk", "status"))
    assert statuses[first.pk] == statuses[second.pk] == GateStatus.APPROVED
    assert statuses[own.pk] == GateStatus.OPEN
    assert Decision.objects.filter(reason="batch of large refunds").count() == 2


def test_bulk_approve_refuses_a_selection_that_mixes_rules(sim, redis_clean, operator, starter):
    large = open_gate(gated_refund(created_by=starter))
    # Low model confidence gates the very first step under another rule.
    unsure = open_gate(gated_refund(created_by=starter, order_id="A1001", confidence=0.5))
    assert large.rule != unsure.rule

    response = client_for(operator).post(
        reverse("reviews:gates_bulk_approve"),
        {"gate": [f"{g.pk}:{g.args_digest}" for g in (large, unsure)]},
    )

    assert response.status_code == 400
    assert "one rule and policy version" in response.content.decode()
    assert Gate.objects.filter(status=GateStatus.OPEN).count() == 2
    assert not Decision.objects.exists()


def test_bulk_approve_with_a_stale_digest_leaves_that_gate_open(redis_clean, operator, starter):
    gate = open_gate(gated_refund_row(created_by=starter))

    response = client_for(operator).post(
        reverse("reviews:gates_bulk_approve"), {"gate": [f"{gate.pk}:{'a' * 64}"]}, follow=True
    )

    assert response.status_code == 200
    assert "already decided" in response.content.decode()
    assert "changed since you opened it" in response.content.decode()
    assert open_gate(gate.task) == gate


def test_the_gate_panel_costs_the_same_queries_at_any_step(
    sim, redis_clean, operator, starter, django_assert_num_queries
):
    early = open_gate(gated_refund(created_by=starter, order_id="A1001", confidence=0.5))
    late = open_gate(gated_refund(created_by=starter))
    assert early.step.ordinal == 0 and late.step.ordinal == 3
    client = client_for(operator)
    client.get(reverse("reviews:inbox"))

    # session; the user with their roles (the group names, which the decider check reads too);
    # gate + steps + ledger; the navigation counts (open gates, stopped tasks); the fleet's
    # stops in force (the banner).
    with django_assert_num_queries(8):
        small = client.get(reverse("reviews:gate", args=[early.pk]))
    with django_assert_num_queries(8):
        large = client.get(reverse("reviews:gate", args=[late.pk]))

    assert small.status_code == large.status_code == 200
    # Three steps done and their three ledger rows.
    assert large.content.decode().count('class="badge badge-succeeded"') == 6
