"""Nobody edits the record: the database refuses deleting the record's rows, updating events and
snapshots and changing a ledger row's identity; the admin offers none of it; only the retention
path (`agentops.retention.tasks_erase`) deletes."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from agentops.models import AuditItem, Event, Gate, Snapshot, Step, Task, ToolCall
from agentops.retention import tasks_erase
from agentops.states import TaskStatus
from tests.builders import refund, run_until_parked_or_done
from tests.reviews.builders import audited_refund, gated_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(sim, redis_clean) -> Task:
    task = run_until_parked_or_done(refund())
    assert task.status == TaskStatus.SUCCEEDED
    return task


def refused(statement: str, params: list[object]) -> str:
    """Run `statement` in a savepoint; return the database's refusal (the test fails if none)."""
    with pytest.raises(DatabaseError) as caught, transaction.atomic(), connection.cursor() as cur:
        cur.execute(statement, params)
    return str(caught.value)


@pytest.mark.parametrize(
    ("table", "model"),
    [
        ("agentops_step", Step),
        ("agentops_toolcall", ToolCall),
        ("agentops_event", Event),
        ("agentops_snapshot", Snapshot),
    ],
)
def test_the_database_refuses_deleting_a_row_of_the_record(finished, table, model):
    row = model.objects.filter(task=finished).first()
    assert row is not None
    message = refused(f"DELETE FROM {table} WHERE id = %s", [row.pk])
    assert f"{table} is part of the record: DELETE refused" in message
    assert model.objects.filter(pk=row.pk).exists()


def test_the_database_refuses_deleting_a_gate_or_an_audit_item(sim, redis_clean):
    gate = Gate.objects.get(task=gated_refund())
    item = AuditItem.objects.filter(task=audited_refund()).first()
    assert gate is not None and item is not None
    assert "agentops_gate is part of the record" in refused(
        "DELETE FROM agentops_gate WHERE id = %s", [gate.pk]
    )
    assert "agentops_audititem is part of the record" in refused(
        "DELETE FROM agentops_audititem WHERE id = %s", [item.pk]
    )


@pytest.mark.parametrize("table", ["agentops_event", "agentops_snapshot"])
def test_the_database_refuses_updating_an_event_or_a_snapshot(finished, table):
    row_id = (Event if table == "agentops_event" else Snapshot).objects.filter(task=finished)[0].pk
    assert "UPDATE refused" in refused(f"UPDATE {table} SET seq = seq WHERE id = %s", [row_id])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("tool", "'send_money'"),
        ("args", """'{"amount": 1000000}'::jsonb"""),
        ("args_digest", "'0000'"),
        ("idempotency_key", "'forged'"),
        ("task_id", "task_id + 1"),
        ("step_id", "step_id + 1"),
    ],
)
def test_the_database_refuses_changing_a_ledger_rows_identity(finished, column, value):
    call = ToolCall.objects.filter(task=finished).first()
    assert call is not None
    message = refused(f"UPDATE agentops_toolcall SET {column} = {value} WHERE id = %s", [call.pk])
    assert "a ledger row's identity is fixed" in message or "violates foreign key" in message
    assert ToolCall.objects.get(pk=call.pk).args_digest == call.args_digest


def test_a_ledger_rows_status_still_moves_along_its_transitions(finished):
    call = ToolCall.objects.filter(task=finished, status="succeeded").first()
    assert call is not None
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agentops_toolcall SET status = 'compensated' WHERE id = %s", [call.pk]
        )
    assert ToolCall.objects.get(pk=call.pk).status == "compensated"


def test_only_the_retention_path_deletes_a_task_and_its_rows(finished):
    with pytest.raises(DatabaseError, match="is part of the record"), transaction.atomic():
        Task.objects.filter(pk=finished.pk).delete()
    assert Step.objects.filter(task=finished).exists()

    assert tasks_erase([finished.pk]) == 1

    assert not Task.objects.filter(pk=finished.pk).exists()
    for model in (Step, ToolCall, Event, Snapshot):
        assert not model.objects.filter(task_id=finished.pk).exists()


@pytest.mark.parametrize(
    "model", [Task, Step, ToolCall, Event, Snapshot, Gate, AuditItem], ids=lambda m: m.__name__
)
def test_the_admin_neither_adds_changes_nor_deletes_the_record(finished, admin_client, model):
    name = model._meta.model_name
    row = model.objects.first() or finished
    assert admin_client.get(f"/admin/agentops/{name}/add/").status_code == 403
    assert admin_client.get(f"/admin/agentops/{name}/{row.pk}/delete/").status_code == 403
    before = model.objects.count()
    response = admin_client.post(
        f"/admin/agentops/{name}/",
        {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"},
    )
    assert response.status_code in {200, 302}
    assert model.objects.count() == before
    if model is not Task:  # the task's budgets stay editable through the service
        change = admin_client.post(f"/admin/agentops/{name}/{row.pk}/change/", {})
        assert change.status_code == 403
