"""A person's interventions on a stopped task: retry, skip, rollback, abort, confirm.

Each is a service that audits itself with an event carrying the acting user, and the runner then
continues (in-process here, against the simulated services over HTTP).
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_reset, fault_set
from agentops.engine import (
    TransitionRefused,
    ledger_confirm,
    task_abort,
    task_create,
    task_retry,
    task_rollback,
    task_skip_step,
)
from agentops.models import Event, Step, Task, ToolCall
from agentops.selectors import task_get_recovery
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from reviews.models import Decision
from tests.builders import run_until_parked_or_done

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user(username="olga", password="x")


def stopped_trip(**input_overrides) -> Task:
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    task = task_create(
        agent="trip", goal="Trip to Lisbon", input={"traveller": "Ada", **input_overrides}
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def effects(service: str, operation: str) -> int:
    return Effect.objects.filter(service=service, operation=operation).count()


def test_a_partial_trip_stops_with_the_flight_booked_and_a_recommendation(sim, redis_clean):
    task = stopped_trip()

    assert ToolCall.objects.get(task=task, tool="book_flight").status == LedgerStatus.SUCCEEDED
    assert effects("flights", "book") == 1 and effects("hotels", "book") == 0
    recommendation = task_get_recovery(task_id=task.pk)
    assert recommendation is not None
    assert recommendation.action in {"retry", "rollback"}
    assert "rollback" in recommendation.options  # the flight can be cancelled


def test_rollback_cancels_the_flight_once_and_ends_rolled_back(sim, redis_clean, operator):
    task = stopped_trip()

    task_rollback(task_id=task.pk, actor=operator, reason="customer cancelled")
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.ROLLED_BACK
    assert effects("flights", "cancel") == 1
    flight = ToolCall.objects.get(task=task, tool="book_flight")
    assert flight.status == LedgerStatus.COMPENSATED
    cancel = ToolCall.objects.get(compensation_of=flight)
    assert cancel.tool == "cancel_flight" and cancel.status == LedgerStatus.SUCCEEDED
    assert cancel.idempotency_key != flight.idempotency_key
    requested = Event.objects.get(task=task, action="agentops.task.resumed")
    assert requested.actor == operator and requested.payload["reason"] == "customer cancelled"
    finished = Event.objects.get(task=task, action="agentops.task.rollback_finished")
    assert finished.payload["not_undone"] == []
    assert run_until_parked_or_done(task).status == TaskStatus.ROLLED_BACK  # a no-op now


def test_rollback_compensates_in_reverse_order(sim, redis_clean, operator):
    fault_set(service="email", operation="send", mode="forbidden", count=1)
    task = run_until_parked_or_done(
        task_create(agent="trip", goal="Trip", input={"traveller": "Ada"})
    )
    assert task.status == TaskStatus.NEEDS_ATTENTION

    task_rollback(task_id=task.pk, actor=operator)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.ROLLED_BACK
    cancelled = list(
        Effect.objects.filter(operation="cancel").order_by("id").values_list("service", flat=True)
    )
    assert cancelled == ["hotels", "flights"]


def test_rollback_lists_effects_that_cannot_be_undone(sim, redis_clean, operator):
    fault_set(service="email", operation="send", mode="forbidden", count=1)
    task = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    )
    assert task.status == TaskStatus.NEEDS_ATTENTION

    task_rollback(task_id=task.pk, actor=operator)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.ROLLED_BACK
    finished = Event.objects.get(task=task, action="agentops.task.rollback_finished")
    assert [row["tool"] for row in finished.payload["not_undone"]] == ["issue_refund"]
    assert effects("payments", "refund") == 1


def test_skip_marks_the_step_skipped_and_the_task_goes_on(sim, redis_clean, operator):
    task = stopped_trip()

    task_skip_step(task_id=task.pk, actor=operator, reason="hotel booked by phone")
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    assert Step.objects.get(task=task, ordinal=2).status == StepStatus.SKIPPED
    assert effects("email", "send") == 1 and effects("hotels", "book") == 0
    assert Event.objects.get(task=task, action="agentops.step.skipped").actor == operator


def test_retry_runs_the_stopped_step_again_with_fresh_attempts(sim, redis_clean, operator):
    task = stopped_trip()
    step = Step.objects.get(task=task, ordinal=2)
    key = ToolCall.objects.get(step=step).idempotency_key

    task_retry(task_id=task.pk, actor=operator)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    step.refresh_from_db()
    assert step.attempts == 1
    assert set(ToolCall.objects.filter(step=step).values_list("idempotency_key", flat=True)) == {
        key
    }
    assert effects("flights", "book") == 1 and effects("hotels", "book") == 1


def test_abort_ends_the_task_and_keeps_its_effects(sim, redis_clean, operator):
    task = stopped_trip()

    task_abort(task_id=task.pk, actor=operator, reason="not needed")

    task.refresh_from_db()
    assert task.status == TaskStatus.ABORTED and task.finished_at is not None
    assert Event.objects.get(task=task, action="agentops.task.aborted").actor_label == "olga"
    with pytest.raises(TransitionRefused, match="is aborted"):
        task_retry(task_id=task.pk, actor=operator)


def unknown_refund() -> Task:
    fault_set(
        service="payments",
        operation="refund_legacy",
        mode="execute_then_timeout",
        count=1,
        delay=1.5,
    )
    task = task_create(
        agent="refund", goal="Refund", input={"order_id": "A1001", "refund_api": "legacy"}
    )
    return task


def test_confirming_an_unknown_call_as_executed_completes_without_calling_again(
    sim, redis_clean, operator, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "TOOL_TIMEOUT_SECONDS": 0.8}
    task = run_until_parked_or_done(unknown_refund())
    call = ToolCall.objects.get(task=task, tool="issue_refund_legacy")
    assert call.status == LedgerStatus.EXECUTED_UNKNOWN
    assert task_get_recovery(task_id=task.pk).action == "confirm"

    ledger_confirm(call_id=call.pk, executed=True, actor=operator, reason="seen in the PSP")
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    assert effects("payments", "refund_legacy") == 1
    call.refresh_from_db()
    assert call.status == LedgerStatus.SUCCEEDED
    assert call.result["confirmed"]["confirmed_by"] == "olga"
    with pytest.raises(TransitionRefused):
        ledger_confirm(call_id=call.pk, executed=True, actor=operator)


def test_confirming_an_unknown_call_as_not_executed_calls_it_again_with_the_same_key(
    sim, redis_clean, operator, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "TOOL_TIMEOUT_SECONDS": 0.8}
    fault_set(
        service="payments", operation="refund_legacy", mode="timeout_before", count=1, delay=1.5
    )
    task = run_until_parked_or_done(
        task_create(
            agent="refund", goal="Refund", input={"order_id": "A1001", "refund_api": "legacy"}
        )
    )
    first = ToolCall.objects.get(task=task, tool="issue_refund_legacy")
    assert first.status == LedgerStatus.EXECUTED_UNKNOWN
    fault_reset(service="payments", operation="refund_legacy")

    ledger_confirm(call_id=first.pk, executed=False, actor=operator)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    rows = list(ToolCall.objects.filter(task=task, tool="issue_refund_legacy").order_by("id"))
    assert [r.status for r in rows] == [LedgerStatus.FAILED, LedgerStatus.SUCCEEDED]
    assert rows[0].idempotency_key == rows[1].idempotency_key
    assert effects("payments", "refund_legacy") == 1


def test_the_database_refuses_an_illegal_ledger_transition(sim, redis_clean):
    task = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    )
    call = ToolCall.objects.filter(task=task, status=LedgerStatus.SUCCEEDED).first()

    for target in ("pending", "failed", "executed_unknown"):
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE agentops_toolcall SET status = %s WHERE id = %s", [target, call.pk]
            )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agentops_toolcall SET status = 'compensated' WHERE id = %s", [call.pk]
        )
    call.refresh_from_db()
    assert call.status == LedgerStatus.COMPENSATED


def test_interventions_are_usable_from_the_admin(sim, redis_clean, admin_client, admin_user):
    task = stopped_trip()
    done = run_until_parked_or_done(
        task_create(agent="refund", goal="done", input={"order_id": "A1001"})
    )

    response = admin_client.post(
        "/admin/agentops/task/",
        {"action": "abort", "_selected_action": [task.pk, done.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert Task.objects.get(pk=task.pk).status == TaskStatus.ABORTED
    assert Task.objects.get(pk=done.pk).status == TaskStatus.SUCCEEDED
    assert Event.objects.get(task=task, action="agentops.task.aborted").actor == admin_user
    decision = Decision.objects.get(action="reviews.intervention.abort")
    assert decision.actor_label == admin_user.username and decision.task_id_ref == task.pk
    shown = [str(m) for m in response.context["messages"]]
    assert any(m.endswith(": abort") for m in shown)
    assert any(str(done) in m and not m.endswith(": abort") for m in shown)


def test_aborting_a_task_at_a_gate_withdraws_the_gate_and_the_sweep_goes_on(
    sim, redis_clean, operator
):
    from datetime import timedelta

    from django.utils import timezone

    from agentops.engine.decisions import gates_expire_overdue
    from agentops.models import Gate

    task = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund B2002", input={"order_id": "B2002"})
    )
    assert task.status == TaskStatus.AWAITING_APPROVAL

    task_abort(task_id=task.pk, actor=operator, reason="customer withdrew")

    gate = Gate.objects.get(task=task)
    assert gate.status == "expired" and gate.feedback.startswith("withdrawn")
    assert gates_expire_overdue(now=timezone.now() + timedelta(days=1)) == 0


def test_an_unfinished_rollback_can_only_be_rolled_back_again_or_aborted(
    sim, redis_clean, operator
):
    fault_set(service="email", operation="send", mode="forbidden", count=1)
    fault_set(service="flights", operation="cancel", mode="forbidden", count=1)
    task = run_until_parked_or_done(
        task_create(agent="trip", goal="Trip", input={"traveller": "Ada"})
    )
    task_rollback(task_id=task.pk, actor=operator)
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION  # the hotel is cancelled, the flight not yet

    recommendation = task_get_recovery(task_id=task.pk)
    assert recommendation.action == "rollback"
    assert tuple(recommendation.options) == ("rollback", "abort")
    with pytest.raises(TransitionRefused, match="rolling back"):
        task_retry(task_id=task.pk, actor=operator)
    with pytest.raises(TransitionRefused, match="rolling back"):
        task_skip_step(task_id=task.pk, actor=operator)

    task_rollback(task_id=task.pk, actor=operator)
    assert run_until_parked_or_done(task).status == TaskStatus.ROLLED_BACK
    assert effects("hotels", "cancel") == 1 and effects("flights", "cancel") == 1
