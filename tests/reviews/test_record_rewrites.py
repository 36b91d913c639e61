"""Nothing rewrites the record unseen: each statement an attacker with the application's database
user tried (issue #39) is refused, and what the product itself changes still goes through.

TRUNCATE is refused on every table of the record and on the decision log; once final, a step's
output and model reply, a gate's decision, decider and arguments, a ledger row's result and a
task's goal and input are fixed (agentops migration 0029)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from agentops.engine import Choice
from agentops.models import Gate, Step, Task, ToolCall
from agentops.states import GateStatus, TaskStatus
from reviews.models import Decision
from reviews.services.gates import gate_decide
from tests.builders import refund, run_until_parked_or_done
from tests.reviews.builders import gated_refund, open_gate

pytestmark = pytest.mark.django_db

RECORD_TABLES = [
    "agentops_task",
    "agentops_step",
    "agentops_toolcall",
    "agentops_event",
    "agentops_snapshot",
    "agentops_gate",
    "agentops_audititem",
    "agentops_artifact",
    "agentops_storedfile",
    "reviews_decision",
]


def refused(statement: str, params: list[object] | None = None) -> str:
    """Run `statement` in a savepoint; return the database's refusal (the test fails if none)."""
    with pytest.raises(DatabaseError) as caught, transaction.atomic(), connection.cursor() as cur:
        cur.execute(statement, params or [])
    return str(caught.value)


@pytest.fixture
def finished(sim, redis_clean) -> Task:
    task = run_until_parked_or_done(refund())
    assert task.status == TaskStatus.SUCCEEDED
    return task


@pytest.fixture
def approved(sim, redis_clean, operator) -> Gate:
    gate = open_gate(gated_refund())
    gate_decide(
        gate_id=gate.pk, choice=Choice.APPROVE, actor=operator, seen_digest=gate.args_digest
    )
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and gate.decided_by == operator
    return gate


@pytest.mark.django_db(transaction=True)
def test_truncating_a_table_of_the_record_is_refused_and_a_test_database_is_still_flushed(
    finished,
):
    """Committed rows (a transaction with the rows' own deferred checks pending cannot truncate
    at all); the flush after this test empties the database through the erasing path."""
    for table in RECORD_TABLES:
        message = refused(f"TRUNCATE {table} CASCADE")
        assert "is part of the record: TRUNCATE refused" in message, table
    assert Step.objects.filter(task=finished).exists()


def test_truncating_the_decision_log_is_refused_and_the_log_stays(approved):
    logged = Decision.objects.count()

    assert "reviews_decision is part of the record: TRUNCATE refused" in refused(
        "TRUNCATE reviews_decision"
    )
    assert logged > 0 and Decision.objects.count() == logged


def test_a_finished_steps_output_and_model_reply_are_fixed(finished):
    step = Step.objects.filter(task=finished).first()
    assert step is not None

    for column in ("output", "model_response"):
        message = refused(
            f"UPDATE agentops_step SET {column} = '{{\"forged\": true}}'::jsonb WHERE id = %s",
            [step.pk],
        )
        assert f"agentops_step {step.pk} is final" in message
    assert Step.objects.get(pk=step.pk).output == step.output


def test_a_decided_gates_decision_decider_and_arguments_are_fixed(approved):
    for assignment in (
        "status = 'rejected', decided_by_id = NULL",
        "decided_by_id = NULL",
        """arguments = '{"amount": 1000000}'::jsonb""",
        """approved_arguments = '{"amount": 1000000}'::jsonb""",
    ):
        message = refused(f"UPDATE agentops_gate SET {assignment} WHERE id = %s", [approved.pk])
        assert f"agentops_gate {approved.pk} is final" in message
    assert Gate.objects.get(pk=approved.pk).status == GateStatus.APPROVED


def test_a_terminal_ledger_rows_result_is_fixed_and_its_status_still_moves(finished):
    call = ToolCall.objects.filter(task=finished, status="succeeded").first()
    assert call is not None

    message = refused(
        """UPDATE agentops_toolcall SET result = '{"forged": true}'::jsonb WHERE id = %s""",
        [call.pk],
    )
    assert f"agentops_toolcall {call.pk} is final" in message
    with connection.cursor() as cursor:  # a compensation moves the status, not the result
        cursor.execute(
            "UPDATE agentops_toolcall SET status = 'compensated' WHERE id = %s", [call.pk]
        )
    assert ToolCall.objects.get(pk=call.pk).result == call.result


def test_a_finished_tasks_goal_and_input_are_fixed(finished):
    for assignment in ("goal = 'Refund nothing'", """input = '{"order_id": "X"}'::jsonb"""):
        message = refused(f"UPDATE agentops_task SET {assignment} WHERE id = %s", [finished.pk])
        assert f"agentops_task {finished.pk} is final" in message
    assert Task.objects.get(pk=finished.pk).goal == finished.goal


def test_writing_what_a_final_row_already_says_is_no_change_and_passes(finished, approved):
    step = Step.objects.filter(task=finished).first()
    assert step is not None
    with connection.cursor() as cursor:
        cursor.execute("UPDATE agentops_step SET output = output WHERE id = %s", [step.pk])
        cursor.execute("UPDATE agentops_task SET goal = goal WHERE id = %s", [finished.pk])
        cursor.execute(
            "UPDATE agentops_gate SET status = status, arguments = arguments WHERE id = %s",
            [approved.pk],
        )
        assert cursor.rowcount == 1


def test_a_running_tasks_rows_still_change_as_it_runs(sim, redis_clean):
    """Before they are final the same columns are the runner's to write: a task runs to its end
    (each step's output, each call's result, the gate's decision written on the way)."""
    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    assert all(step.output is not None for step in Step.objects.filter(task=task))
