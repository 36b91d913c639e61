"""The inbox's version is counted by the database (reviews migration 0019): every change to what
the inbox can show moves it, and nothing else does, above all not a running task's steps.

The oracle is the digest the inbox's version used to be: every open gate and stopped task with
the columns its row prints, who holds it, whether a call waits for confirmation, and the
operators an item can be assigned to (`shown_digest`). Each change below either moves that
digest and the count, or neither. Rolled back: the triggers count inside the test's transaction.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.utils import timezone

from agentops.engine import task_create
from agentops.models import Gate, Step, Task, ToolCall
from agentops.states import GateStatus, LedgerStatus, StepStatus, TaskStatus
from reviews.models import InboxChanges
from reviews.selectors import inbox_state
from reviews.services import claim_release, claim_take, gate_approve, inbox_changes_fold
from tests.factories import gated_refund_row, stopped_trip_row
from tests.statuses import status_walk

pytestmark = pytest.mark.django_db

migration = importlib.import_module("reviews.migrations.0019_inbox_changes")


def shown_digest() -> str:
    """md5 of everything the inbox shows, read row by row (the inbox's version before 0019)."""
    task_columns = (
        't."id", t."updated_at", t."agent", t."goal", t."failure", t."status_changed_at", '
        't."created_by_id", c."user_id", c."claimed_at", u."username"'
    )
    holder = (
        'LEFT JOIN "reviews_claim" c ON c."task_id" = t."id" '
        'LEFT JOIN "auth_user" u ON u."id" = c."user_id"'
    )
    unknown = (
        'EXISTS (SELECT 1 FROM "agentops_toolcall" k WHERE k."task_id" = t."id" '
        "AND k.\"status\" = 'executed_unknown')"
    )
    sql = f"""
        SELECT md5(coalesce(string_agg(r, E'\\n' ORDER BY r), '')) FROM (
            SELECT CAST(ROW('g', g.*, {task_columns}) AS text) AS r
            FROM "agentops_gate" g JOIN "agentops_task" t ON t."id" = g."task_id" {holder}
            WHERE g."status" = 'open'
            UNION ALL
            SELECT CAST(ROW('t', {task_columns}, {unknown}) AS text)
            FROM "agentops_task" t {holder}
            WHERE t."status" = 'needs_attention'
            UNION ALL
            SELECT CAST(ROW('o', o."id", o."username") AS text)
            FROM "auth_user" o
            WHERE o."is_active" AND EXISTS (
                SELECT 1 FROM "auth_user_groups" m JOIN "auth_group" gr ON gr."id" = m."group_id"
                WHERE m."user_id" = o."id" AND gr."name" = 'operators')
        ) AS inbox
    """
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return str(cursor.fetchone()[0])


def test_the_migration_counts_the_statuses_the_inbox_shows():
    waiting = set(re.findall(r"'(\w+)'", migration.WAITING))
    assert waiting == {TaskStatus.AWAITING_APPROVAL.value, TaskStatus.NEEDS_ATTENTION.value}
    conditions = " ".join(condition or "" for _, _, condition in migration.COUNTED)
    assert set(re.findall(r"'(\w+)'", conditions)) == waiting | {
        GateStatus.OPEN.value,
        LedgerStatus.EXECUTED_UNKNOWN.value,
    }


@pytest.fixture
def waiting(operator, operator2, starter) -> dict[str, Any]:
    """A gated refund, a stopped trip, a running task and a queued one; olga holds the trip."""
    gated = gated_refund_row(created_by=starter)
    stopped = stopped_trip_row(created_by=starter)
    running = task_create(agent="trip", goal="Trip to Porto", input={"traveller": "Bo"})
    status_walk(running, TaskStatus.RUNNING)
    queued = task_create(agent="trip", goal="Trip to Faro", input={"traveller": "Cy"})
    claim_take(task_id=stopped.pk, actor=operator)
    return {
        "gated": gated,
        "gate": Gate.objects.get(task=gated, status=GateStatus.OPEN),
        "stopped": stopped,
        "running": running,
        "queued": queued,
        "operator": operator,
        "operator2": operator2,
        "starter": starter,
    }


def _touch(task: Task, **fields: Any) -> None:
    Task.objects.filter(pk=task.pk).update(updated_at=timezone.now(), **fields)


def _unknown_call(task: Task) -> None:
    step = Step.objects.filter(task=task, status=StepStatus.FAILED).get()
    call = ToolCall.objects.create(
        task=task,
        step=step,
        tool="hotels.book",
        side_effect="financial",
        args={"hotel": "H1"},
        args_digest="d" * 64,
        idempotency_key=f"{task.pk}:unknown",
        status=LedgerStatus.PENDING,
    )
    ToolCall.objects.filter(pk=call.pk).update(status=LedgerStatus.EXECUTED_UNKNOWN)


def _new_operator(_: dict[str, Any]) -> None:
    newcomer = User.objects.create_user("nadia", password="x")
    newcomer.groups.add(Group.objects.get(name="operators"))


SHOWN: dict[str, Callable[[dict[str, Any]], object]] = {
    "a new gate": lambda w: gated_refund_row(created_by=w["starter"], order_id="B3003"),
    "a new stopped task": lambda w: stopped_trip_row(goal="Trip to Rome"),
    "a gate decided": lambda w: gate_approve(
        gate_id=w["gate"].pk, actor=w["operator"], seen_digest=w["gate"].args_digest
    ),
    "a gate's due time": lambda w: Gate.objects.filter(pk=w["gate"].pk).update(
        due_at=timezone.now()
    ),
    "a gate's approvals": lambda w: Gate.objects.filter(pk=w["gate"].pk).update(approvals=[1]),
    "a gated task's goal": lambda w: _touch(w["gated"], goal="Refund, urgently"),
    "a stopped task's failure": lambda w: _touch(w["stopped"], failure={"kind": "other"}),
    "a stopped task committed": lambda w: _touch(w["stopped"]),
    "a claim taken": lambda w: claim_take(task_id=w["gated"].pk, actor=w["operator2"]),
    "a claim released": lambda w: claim_release(task_id=w["stopped"].pk, actor=w["operator"]),
    "a call of unknown outcome": lambda w: _unknown_call(w["stopped"]),
    "a holder renamed": lambda w: User.objects.filter(pk=w["operator"].pk).update(username="olga2"),
    "an operator deactivated": lambda w: User.objects.filter(pk=w["operator2"].pk).update(
        is_active=False
    ),
    "an operator left the group": lambda w: w["operator2"].groups.clear(),
    "a new operator": _new_operator,
    "the operators group renamed": lambda w: Group.objects.filter(name="operators").update(
        name="ops"
    ),
}

NOT_SHOWN: dict[str, Callable[[dict[str, Any]], object]] = {
    "a running task's step committed": lambda w: _touch(w["running"]),
    "a running task's goal": lambda w: _touch(w["running"], goal="Trip to Braga"),
    "a queued task started": lambda w: status_walk(w["queued"], TaskStatus.RUNNING),
    "a new queued task": lambda w: task_create(agent="trip", goal="Trip", input={}),
    "a user's last login": lambda w: User.objects.filter(pk=w["operator"].pk).update(
        last_login=timezone.now()
    ),
}


@pytest.mark.parametrize("change", SHOWN)
def test_every_change_the_inbox_shows_is_counted(waiting, change):
    digest, version = shown_digest(), inbox_state()

    SHOWN[change](waiting)

    assert shown_digest() != digest, "the change is one the inbox shows"
    assert inbox_state() != version


@pytest.mark.parametrize("change", NOT_SHOWN)
def test_a_change_the_inbox_does_not_show_is_not_counted(waiting, change):
    digest, version = shown_digest(), inbox_state()

    NOT_SHOWN[change](waiting)

    assert shown_digest() == digest, "the change is one the inbox does not show"
    assert inbox_state() == version


def _own_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_transaction_counts_in_its_connections_own_row(waiting):
    before = InboxChanges.objects.get(backend=_own_pid()).changes

    _touch(waiting["stopped"])
    _touch(waiting["stopped"], goal="Trip to Lisbon, again")

    assert InboxChanges.objects.get(backend=_own_pid()).changes == before + 2
    assert list(InboxChanges.objects.values_list("backend", flat=True)) == [_own_pid()]


def test_the_sweep_folds_ended_connections_rows_and_keeps_the_sum(waiting):
    # Rows that connections now ended left (no server process has these pids).
    InboxChanges.objects.bulk_create(
        [
            InboxChanges(backend=2_000_000_001, changes=7),
            InboxChanges(backend=2_000_000_002, changes=5),
        ]
    )
    own = InboxChanges.objects.get(backend=_own_pid()).changes
    version = inbox_state()

    assert inbox_changes_fold() == 0
    inbox_changes_fold()  # nothing more to fold: the sum holds

    assert inbox_state() == version
    assert dict(InboxChanges.objects.values_list("backend", "changes")) == {
        InboxChanges.FOLDED: 12,
        _own_pid(): own,
    }
    _touch(waiting["stopped"])
    assert inbox_state() == str(int(version) + 1)
