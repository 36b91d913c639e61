"""`manage.py retention`: finished task families are archived (JSON Lines, sha256 manifest) and then
removed through the one path the record's triggers allow; the archive reads back; nothing else is
touched; the decision log keeps its rows and records the erasure."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Model
from django.utils import timezone

from agentops.engine import task_create
from agentops.models import Artifact, Event, Snapshot, Step, Task, ToolCall
from agentops.states import StepStatus, TaskStatus
from reviews.models import Decision
from reviews.services import decision_record
from reviews.states import VIA_SYSTEM
from tests.builders import refund, run_until_parked_or_done

pytestmark = pytest.mark.django_db

OLD = timezone.now() - timedelta(days=400)
CUT_OFF = (timezone.now() - timedelta(days=30)).date().isoformat()
# The batching test: more old tasks than eight batches hold, so the plan, the archive and the
# erasure each go through nine batches, the last one partial (40 + 2 tasks at 5 a batch); the
# default batch (agentops.retention.BATCH) is a size, not a different path.
OLD_TASKS = 40
BATCH_SIZE = 5


def finished_rows(count: int) -> list[int]:
    """`count` succeeded tasks that ended long ago, one step and two events each, as row
    factories (written whole, so the transition triggers are off for these inserts only).
    The first family is made by the ORM; the others are copies of its rows, one INSERT ... SELECT
    per table, with their own goal and order."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
    task = Task.objects.create(
        agent="refund",
        goal="Refund order B0",
        input={"order_id": "B0"},
        status=TaskStatus.SUCCEEDED,
        step_count=1,
        current_step=1,
        last_seq=2,
        finished_at=OLD,
    )
    Step.objects.create(
        task=task, ordinal=0, title="Look up", status=StepStatus.SUCCEEDED, output={"ok": 1}
    )
    Event.objects.bulk_create(
        Event(task=task, seq=seq, action=f"agentops.test.{seq}") for seq in (1, 2)
    )
    ids = [task.pk, *copies(task.pk, count - 1)]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")
    return ids


def columns(model: type[Model], *, but: set[str]) -> list[str]:
    return [f.column for f in model._meta.concrete_fields if f.column not in {"id", *but}]


def copies(template: int, count: int) -> list[int]:
    """`count` copies of task `template`'s rows (task, steps, events), task n (1..count) for
    order Bn; the new task ids."""
    if count < 1:
        return []
    task_cols = columns(Task, but={"goal", "input"})
    listed = ", ".join(task_cols)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Task._meta.db_table} ({listed}, goal, input) "
            f"SELECT {listed}, 'Refund order B' || n, jsonb_build_object('order_id', 'B' || n) "
            f"FROM {Task._meta.db_table}, generate_series(1, %s) AS n WHERE id = %s "
            "ORDER BY n RETURNING id",
            [count, template],
        )
        ids = [row[0] for row in cursor.fetchall()]
        for model in (Step, Event):
            cols = ", ".join(columns(model, but={"task_id"}))
            cursor.execute(
                f"INSERT INTO {model._meta.db_table} ({cols}, task_id) "
                f"SELECT {cols}, copy.id FROM {model._meta.db_table}, unnest(%s::bigint[]) "
                "AS copy(id) WHERE task_id = %s",
                [ids, template],
            )
    return ids


def backdate(task: Task) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE agentops_task SET finished_at = %s WHERE id = %s", [OLD, task.pk])


def test_retention_archives_tasks_in_many_batches_removes_them_and_touches_nothing_else(
    tmp_path, sim, redis_clean, settings, django_capture_on_commit_callbacks
):
    settings.MEDIA_ROOT = tmp_path / "media"
    old_ids = finished_rows(OLD_TASKS)
    assert (OLD_TASKS + 2) // BATCH_SIZE == 8 and (OLD_TASKS + 2) % BATCH_SIZE
    real = run_until_parked_or_done(refund())
    assert real.status == TaskStatus.SUCCEEDED
    backdate(real)
    big = run_until_parked_or_done(
        task_create(agent="bench_noop", goal="big", input={"steps": 1, "payload_kb": 300})
    )
    backdate(big)
    artifacts = list(Artifact.objects.filter(task=big))
    assert artifacts
    decision_record(
        action="reviews.gate.approved", actor=None, subject="gate", task_id=real.pk, via=VIA_SYSTEM
    )
    recent = run_until_parked_or_done(refund())  # finished now: after the cut-off
    waiting = refund()  # queued: not finished
    kept = {"recent": recent.pk, "waiting": waiting.pk}
    kept_steps = Step.objects.filter(task_id__in=kept.values()).count()
    real_calls = ToolCall.objects.filter(task=real).count()
    archive = tmp_path / "archive"

    out = StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command(
            "retention",
            "--finished-before",
            CUT_OFF,
            "--archive",
            str(archive),
            "--batch",
            str(BATCH_SIZE),
            stdout=out,
        )

    total = OLD_TASKS + 2
    assert out.getvalue().strip() == f"archived {total} tasks to {archive}; removed {total}"
    gone = [*old_ids, real.pk, big.pk]
    assert not Task.objects.filter(pk__in=gone).exists()
    for model in (Step, ToolCall, Event, Snapshot, Artifact):
        assert not model.objects.filter(task_id__in=gone).exists()
    assert not any((tmp_path / "media" / artifact.name).exists() for artifact in artifacts)
    # Untouched: the recent and the waiting task, their steps.
    assert set(Task.objects.values_list("pk", flat=True)) == set(kept.values())
    assert Step.objects.filter(task_id__in=kept.values()).count() == kept_steps
    # The decision log keeps its rows (append-only) and records the erasure.
    assert Decision.objects.filter(task_id_ref=real.pk, action="reviews.gate.approved").exists()
    erased = Decision.objects.get(action="reviews.retention.erased")
    assert erased.detail["tasks"] == total

    manifest = json.loads((archive / "manifest.json").read_text())
    assert manifest["tasks"] == total
    assert manifest["rows"]["steps"] == OLD_TASKS + real.step_count + big.step_count
    assert manifest["rows"]["decisions"] == 1
    assert {f"artifacts/{artifact.name}" for artifact in artifacts} <= set(manifest["files"])
    lines = (archive / "tasks.jsonl").read_text().splitlines()
    assert len(lines) == total
    line = next(json.loads(text) for text in lines if json.loads(text)["task"]["pk"] == real.pk)
    assert line["task"]["fields"]["goal"] == "Refund order A1001"
    assert len(line["tool_calls"]) == real_calls > 0
    assert {row["fields"]["status"] for row in line["tool_calls"]} == {"succeeded"}

    verified = StringIO()
    call_command("retention", "--verify", str(archive), stdout=verified)
    assert f"complete: {total} tasks" in verified.getvalue()


def test_a_damaged_archive_fails_verification(tmp_path, redis_clean):
    finished_rows(3)
    archive = tmp_path / "archive"
    call_command("retention", "--finished-before", CUT_OFF, "--archive", str(archive))
    tasks = archive / "tasks.jsonl"
    tasks.write_text(tasks.read_text().replace("Refund order B1", "Refund order XX"))
    with pytest.raises(CommandError, match=r"tasks.jsonl: sha256 \w+ does not match the manifest"):
        call_command("retention", "--verify", str(archive))


def test_a_family_with_an_unfinished_child_is_kept_whole(tmp_path, redis_clean):
    (parent_id,) = finished_rows(1)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
    child = Task.objects.create(
        agent="refund",
        goal="child",
        parent_id=parent_id,
        parent_step=Step.objects.get(task_id=parent_id),
        fanout_index=0,
    )
    out = StringIO()
    call_command("retention", "--finished-before", CUT_OFF, "--dry-run", stdout=out)
    assert out.getvalue().strip() == (
        "would archive and remove 0 tasks (1 families kept: a member has not finished)"
    )
    call_command("retention", "--finished-before", CUT_OFF, "--archive", str(tmp_path / "a"))
    assert Task.objects.filter(pk__in=[parent_id, child.pk]).count() == 2


def test_retention_refuses_to_remove_without_an_archive_and_changes_nothing(redis_clean):
    ids = finished_rows(2)
    with pytest.raises(CommandError, match="give --archive DIR"):
        call_command("retention", "--finished-before", CUT_OFF)
    with pytest.raises(CommandError, match="expected a date"):
        call_command("retention", "--finished-before", "last year", "--dry-run")
    with pytest.raises(CommandError, match="--batch"):
        call_command("retention", "--finished-before", CUT_OFF, "--dry-run", "--batch", "0")
    assert Task.objects.filter(pk__in=ids).count() == 2


def test_an_archived_task_answers_410_with_where_it_went_and_reads_back_from_its_archive(
    tmp_path, redis_clean, operator, task_starter
):
    from django.test import Client

    from tests.builders import signed_in
    from tests.reviews.test_api import api_client as api

    ids = finished_rows(2)
    archive = tmp_path / "archive"
    call_command("retention", "--finished-before", CUT_OFF, "--archive", str(archive))

    answer = api(operator).get(f"/api/v1/tasks/{ids[0]}")
    assert answer.status_code == 410
    detail = answer.json()["detail"]
    assert detail.startswith(f"task {ids[0]} was archived on ") and str(archive) in detail
    assert f"manage.py retention --show {archive} {ids[0]}" in detail
    # Someone who could not see the task is not told it existed.
    assert api(task_starter).get(f"/api/v1/tasks/{ids[0]}").status_code == 404
    assert api(operator).get("/api/v1/tasks/999999").status_code == 404
    page = signed_in(Client(), operator).get(f"/tasks/{ids[0]}")
    assert page.status_code == 410
    assert f"Task {ids[0]} was archived" in page.content.decode()

    out = StringIO()
    call_command("retention", "--show", str(archive), str(ids[0]), stdout=out)
    shown = out.getvalue()
    assert shown.startswith(f"Task {ids[0]} (refund), archived in {archive}\nGoal: Refund order B0")
    assert "step 1: Look up (succeeded)" in shown and "events 2" in shown
    out = StringIO()
    call_command("retention", "--show", str(archive), str(ids[1]), "--json", stdout=out)
    assert json.loads(out.getvalue())["task"]["fields"]["goal"] == "Refund order B1"
    with pytest.raises(CommandError, match="no task 999999 in this archive"):
        call_command("retention", "--show", str(archive), "999999")
