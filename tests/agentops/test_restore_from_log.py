"""Restore from the log: rows that disagree with the snapshot and the events after it stop the
task with `checkpoint_mismatch`; `manage.py checkpoint verify` shows where, `restore` (an
operator's decision, with a reason) rebuilds the rows from the fold, and a retry resumes the
task to its end with no effect repeated.

The trip agent runs in-process against the simulated services over HTTP; the hotel refuses once
(a scope it lacks), which stops the task with the flight booked. Then a person edits rows by
hand, as a partial backup restore or a stray UPDATE would.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create, task_retry
from agentops.engine.errors import FailureKind
from agentops.models import Event, Snapshot, Step, Task, ToolCall
from agentops.selectors import task_get_recovery
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from reviews.models import Decision
from reviews.services import ReviewError, task_restore_from_log
from reviews.states import DecisionChannel, Role
from tests.builders import run_until_parked_or_done

pytestmark = pytest.mark.django_db

FLIGHT_STEP = 1


@pytest.fixture
def operator(django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username="olga", password="x")
    user.groups.add(Group.objects.get_or_create(name=Role.OPERATORS)[0])
    return user


def stopped_trip() -> Task:
    """A trip stopped at the hotel (403 once), the flight booked and recorded."""
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    task = run_until_parked_or_done(
        task_create(agent="trip", goal="Trip to Lisbon", input={"traveller": "Ada"})
    )
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.AUTHORIZATION_GAP
    return task


def tamper(task: Task) -> str:
    """Edit rows by hand: the flight's step back to pending (with its trigger off, as a person
    at a psql prompt could), its ledger row marked compensated, the pointer moved back.
    Returns the flight's idempotency key."""
    flight = ToolCall.objects.get(task=task, tool="book_flight")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")  # triggers off
        cursor.execute(
            "UPDATE agentops_step SET status = 'pending' WHERE task_id = %s AND ordinal = %s",
            [task.pk, FLIGHT_STEP],
        )
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")
        cursor.execute(
            "UPDATE agentops_toolcall SET status = 'compensated' WHERE id = %s", [flight.pk]
        )
        cursor.execute("UPDATE agentops_task SET current_step = 0 WHERE id = %s", [task.pk])
    return flight.idempotency_key


def effects(service: str, operation: str) -> int:
    return Effect.objects.filter(service=service, operation=operation).count()


def checkpoint(*args: str) -> tuple[dict, CommandError | None]:
    out = StringIO()
    try:
        call_command("checkpoint", *args, "--json", stdout=out)
    except CommandError as exc:
        return json.loads(out.getvalue() or "{}"), exc
    return json.loads(out.getvalue()), None


def retried(task: Task, operator) -> Task:
    task_retry(task_id=task.pk, actor=operator, reason="resume")
    return run_until_parked_or_done(task)


def test_a_tampered_row_stops_the_task_with_checkpoint_mismatch_and_its_advice(
    sim, redis_clean, operator
):
    task = stopped_trip()
    tamper(task)

    task = retried(task, operator)

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.CHECKPOINT_MISMATCH
    assert "disagree with the rows on current_step, ledger, steps" in task.failure["message"]
    recovery = task_get_recovery(task_id=task.pk)
    assert recovery is not None and recovery.rule == "checkpoint-mismatch"
    assert "manage.py checkpoint restore" in recovery.rationale
    # The stop wrote no snapshot: a retry without a restore stops again, on the same rows.
    assert not Snapshot.objects.filter(task=task, seq__gt=task.last_seq - 2).exists()
    task = retried(task, operator)
    assert task.failure["kind"] == FailureKind.CHECKPOINT_MISMATCH
    assert effects("flights", "book") == 1 and effects("hotels", "book") == 0


def test_verify_reports_each_difference_with_the_rows(sim, redis_clean, operator):
    task = stopped_trip()
    key = tamper(task)

    report, error = checkpoint("verify", str(task.pk))

    assert error is not None and "3 differences" in str(error)
    assert report["differences"] == [
        {"field": "current_step", "rows": 0, "log": 2},
        {"field": "steps.1", "rows": "pending", "log": "succeeded"},
        {"field": f"ledger.{key}", "rows": "compensated", "log": "succeeded"},
    ]
    assert report["snapshot_seq"] <= task.last_seq


def test_restore_rewrites_the_rows_from_the_log_and_the_retry_repeats_no_effect(
    sim, redis_clean, operator
):
    task = stopped_trip()
    key = tamper(task)
    task = retried(task, operator)
    assert task.failure["kind"] == FailureKind.CHECKPOINT_MISMATCH

    report, error = checkpoint(
        "restore", str(task.pk), "--by", "olga", "--reason", "rows edited by hand"
    )

    assert error is None and report["action"] == "restored"
    assert len(report["differences"]) == 3
    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION and task.current_step == 2
    assert Step.objects.get(task=task, ordinal=FLIGHT_STEP).status == StepStatus.SUCCEEDED
    assert ToolCall.objects.get(idempotency_key=key).status == LedgerStatus.SUCCEEDED
    decision = Decision.objects.get(action="reviews.task.restored")
    assert decision.actor == operator and decision.reason == "rows edited by hand"
    assert decision.channel == DecisionChannel.COMMAND and decision.task_id_ref == task.pk
    assert len(decision.detail["differences"]) == 3
    event = Event.objects.get(task=task, action="agentops.task.restored")
    assert event.actor == operator and event.payload["reason"] == "rows edited by hand"
    assert checkpoint("verify", str(task.pk))[1] is None

    task = retried(task, operator)

    assert task.status == TaskStatus.SUCCEEDED
    assert effects("flights", "book") == 1  # booked once, before the mismatch
    assert effects("hotels", "book") == 1
    assert effects("email", "send") == 1
    assert ToolCall.objects.filter(task=task, tool="book_flight").count() == 1


def test_restore_is_refused_unless_the_task_is_stopped_and_differs(sim, redis_clean, operator):
    task = stopped_trip()
    with pytest.raises(ReviewError, match="nothing to restore"):
        task_restore_from_log(task_id=task.pk, actor=operator, reason="just in case")

    tamper(task)
    Task.objects.filter(pk=task.pk).update(failure=task.failure)  # still stopped
    with pytest.raises(ReviewError, match="a reason is required"):
        task_restore_from_log(task_id=task.pk, actor=operator, reason="  ")
    task_retry(task_id=task.pk, actor=operator, reason="resume")  # now queued
    with pytest.raises(ReviewError, match="only a stopped task"):
        task_restore_from_log(task_id=task.pk, actor=operator, reason="rows edited")
    assert not Decision.objects.filter(action="reviews.task.restored").exists()
    assert not Event.objects.filter(task=task, action="agentops.task.restored").exists()


def test_restore_needs_an_operator(sim, redis_clean, django_user_model):
    task = stopped_trip()
    tamper(task)
    django_user_model.objects.create_user(username="vic", password="x")

    _, error = checkpoint("restore", str(task.pk), "--by", "vic", "--reason", "edited")

    assert error is not None and "only operators" in str(error)
    assert Step.objects.get(task=task, ordinal=FLIGHT_STEP).status == StepStatus.PENDING


def test_the_database_refuses_the_same_rewrite_outside_a_restore(sim, redis_clean):
    task = stopped_trip()
    flight = ToolCall.objects.get(task=task, tool="book_flight")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agentops_toolcall SET status = 'compensated' WHERE id = %s", [flight.pk]
        )
        from django.db import IntegrityError, transaction

        with pytest.raises(IntegrityError, match="illegal ledger transition"), transaction.atomic():
            cursor.execute(
                "UPDATE agentops_toolcall SET status = 'succeeded' WHERE id = %s", [flight.pk]
            )
        # Declaring a restore of another task does not open this one's rows.
        cursor.execute("SELECT set_config('agentops.restoring', %s, true)", [str(task.pk + 1)])
        with pytest.raises(IntegrityError, match="illegal ledger transition"), transaction.atomic():
            cursor.execute(
                "UPDATE agentops_toolcall SET status = 'succeeded' WHERE id = %s", [flight.pk]
            )
