"""The database refuses task and step transitions the tables in agentops/states.py do not allow,
and the transition code refuses caller fields it owns."""

from __future__ import annotations

import importlib
import re

import pytest
from django.db import IntegrityError, connection, transaction

from agentops.engine.transitions import (
    EventSpec,
    Lease,
    fenced_write,
    ledger_transition,
    step_record,
    step_transition,
    task_append_event,
    task_transition,
)
from agentops.models import Step, Task
from agentops.states import (
    STEP_TRANSITIONS,
    TASK_TRANSITIONS,
    StepStatus,
    TaskStatus,
    Transition,
)
from tests.statuses import status_walk

pytestmark = pytest.mark.django_db
MIGRATION = importlib.import_module("agentops.migrations.0009_task_step_transition_triggers")
TABLES = {
    "agentops_task": (TASK_TRANSITIONS, TaskStatus),
    "agentops_step": (STEP_TRANSITIONS, StepStatus),
}


def moves(table: dict[str, Transition]) -> set[tuple[str, str]]:
    """The status changes a table allows (a transition onto the same status changes none)."""
    return {
        (str(source), str(spec.target))
        for spec in table.values()
        for source in spec.sources
        if source != spec.target
    }


def trigger_pairs(table: str) -> set[tuple[str, str]]:
    """The (source, target) pairs of the trigger function installed in the database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = %s", [f"{table}_check_transition"]
        )
        (source,) = cursor.fetchone()
    return set(re.findall(r"\('(\w+)', '(\w+)'\)", source))


def test_the_migration_holds_the_transition_tables():
    assert set(MIGRATION.TASK_PAIRS) == moves(TASK_TRANSITIONS)
    assert set(MIGRATION.STEP_PAIRS) == moves(STEP_TRANSITIONS)
    assert MIGRATION.TASK_INITIAL == Task._meta.get_field("status").default == TaskStatus.QUEUED
    assert MIGRATION.STEP_INITIAL == Step._meta.get_field("status").default == StepStatus.PENDING


@pytest.mark.parametrize("table", sorted(TABLES))
def test_the_installed_triggers_hold_the_transition_tables(table):
    transitions, _ = TABLES[table]
    assert trigger_pairs(table) == moves(transitions)


def raw_status(table: str, pk: int, status: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET status = %s WHERE id = %s", [status, pk])


def refused(table: str, pk: int, status: str) -> bool:
    try:
        with transaction.atomic():
            raw_status(table, pk, status)
            transaction.set_rollback(True)
    except IntegrityError as exc:
        assert "illegal" in str(exc)
        return True
    return False


def new_task() -> Task:
    # A failure recorded, as every stopped task has one (the walk passes needs_attention).
    failure = {"layer": "test", "kind": "tool_timeout", "message": "walked by the test"}
    return Task.objects.create(agent="refund", goal="g", failure=failure)


def test_the_database_allows_exactly_the_task_table():
    allowed = moves(TASK_TRANSITIONS)
    for source in TaskStatus.values:
        task = new_task()
        status_walk(task, source)
        for target in TaskStatus.values:
            legal = source == target or (source, target) in allowed
            assert refused("agentops_task", task.pk, target) is not legal, (source, target)


def test_the_database_allows_exactly_the_step_table():
    allowed = moves(STEP_TRANSITIONS)
    task = new_task()
    for ordinal, source in enumerate(StepStatus.values):
        step = Step.objects.create(task=task, ordinal=ordinal, title="s")
        status_walk(step, source)
        for target in StepStatus.values:
            legal = source == target or (source, target) in allowed
            assert refused("agentops_step", step.pk, target) is not legal, (source, target)


def test_an_illegal_raw_update_raises_and_other_fields_still_change():
    task = new_task()
    status_walk(task, TaskStatus.SUCCEEDED)

    illegal = "illegal task transition succeeded -> running"
    with pytest.raises(IntegrityError, match=illegal), transaction.atomic():
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING)
    # An update that keeps the status is no transition (what a finished task says is fixed,
    # tests/reviews/test_record_rewrites.py; a budget is not).
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUCCEEDED, recovery_cap=9)
    task.refresh_from_db()
    assert (task.status, task.recovery_cap) == (TaskStatus.SUCCEEDED, 9)


def test_rows_start_in_the_initial_status():
    with pytest.raises(IntegrityError, match="a task must start queued"), transaction.atomic():
        Task.objects.create(agent="refund", goal="g", status=TaskStatus.SUCCEEDED)
    task = new_task()
    with pytest.raises(IntegrityError, match="a step must start pending"), transaction.atomic():
        Step.objects.create(task=task, ordinal=0, title="s", status=StepStatus.SUCCEEDED)
    assert Task.objects.count() == 1
    assert not Step.objects.exists()


@pytest.mark.parametrize(
    "field", ["status", "lease_epoch", "lease_owner", "lease_expires_at", "last_seq"]
)
def test_task_writers_refuse_the_fields_they_own(field):
    task = new_task()
    lease = Lease(task_id=task.pk, epoch=task.lease_epoch, owner="w", last_seq=task.last_seq)

    with pytest.raises(TypeError, match=field):
        task_transition(task_id=task.pk, name="pause", **{field: None})
    with pytest.raises(TypeError, match=field):
        fenced_write(lease, [], **{field: None})
    with pytest.raises(TypeError, match=field):
        task_append_event(task_id=task.pk, event=EventSpec("agentops.task.noted"), **{field: None})
    task.refresh_from_db()
    assert (task.status, task.last_seq) == (TaskStatus.QUEUED, 0)


def test_step_and_ledger_writers_refuse_a_status():
    task = new_task()
    step = Step.objects.create(task=task, ordinal=0, title="s")

    with pytest.raises(TypeError, match="status"):
        step_transition(step=step, name="start", status=StepStatus.SUCCEEDED)
    with pytest.raises(TypeError, match="status"):
        step_record(step=step, status=StepStatus.SUCCEEDED)
    with pytest.raises(TypeError, match="status"):
        ledger_transition(call_id=0, target="succeeded", status="succeeded")
    step.refresh_from_db()
    assert step.status == StepStatus.PENDING


def test_a_transition_records_the_event_its_table_declares():
    task = new_task()

    assert task_transition(task_id=task.pk, name="pause")
    assert task_transition(task_id=task.pk, name="resume")

    actions = list(task.events.order_by("seq").values_list("action", flat=True))
    assert actions == [TASK_TRANSITIONS["pause"].event, TASK_TRANSITIONS["resume"].event]
    assert actions == ["agentops.task.paused", "agentops.task.resumed"]
