"""The one-statement commit (`commit.Commit`): every write in it is fenced, a refused part
undoes all of it, and it is one round trip outside a transaction."""

from __future__ import annotations

import os
import stat
import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now

from agentops.dev.benchmarks.checkpoint import BENCH_POLICY, bench_policy_ensure
from agentops.engine import commit as commit_module
from agentops.engine import task_create
from agentops.engine.errors import CheckpointMismatch, LeaseLost
from agentops.engine.jsonvalues import loaded
from agentops.engine.runner import task_advance
from agentops.engine.transitions import (
    EventSpec,
    artifact_id_reserved,
    fenced_commit,
    fenced_write,
    task_claim,
)
from agentops.models import Artifact, Event, Snapshot, Step, Task, ToolCall
from agentops.states import LedgerStatus, StepStatus

pytestmark = pytest.mark.django_db(transaction=True)


def claimed():  # type: ignore[no-untyped-def]
    task = task_create(agent="bench_noop", goal="bench", input={"steps": 2, "payload_kb": 0})
    lease = task_claim(task_id=task.pk, owner="test")
    assert lease is not None
    return task, lease


def statements_noted(order: list[str]) -> Any:
    """An execute wrapper that notes "statement" in `order` for each statement sent."""

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        order.append("statement")
        return execute(sql, params, many, context)

    return record


def test_a_commit_is_one_statement_and_writes_every_part(redis_clean):
    task, lease = claimed()
    step = Step.objects.get(task=task, ordinal=0)

    sent: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    with (
        connection.execute_wrapper(record),
        fenced_commit(lease, [EventSpec("agentops.step.started", step=0)], phase="x") as c,
    ):
        c.step(step, "start", required=True, attempts=1, started_at=Now())
        call = c.call_create(
            task=task,
            step=step,
            tool="bench_echo",
            side_effect="read",
            args={"n": 0},
            args_digest="d",
            idempotency_key=f"k{task.pk}",
        )
        c.snapshot({"status": "running"})

    assert len(sent) == 1
    assert sent[0].startswith("WITH fence AS (UPDATE")
    step.refresh_from_db()
    assert step.status == StepStatus.RUNNING and step.attempts == 1
    assert ToolCall.objects.get(pk=call.pk).status == LedgerStatus.PENDING
    assert Snapshot.objects.filter(task=task, seq=lease.last_seq).exists()
    assert Task.objects.get(pk=task.pk).last_seq == lease.last_seq


def test_a_commit_with_no_fields_to_set_still_fences_and_logs(redis_clean):
    task, lease = claimed()
    before = lease.last_seq

    # The lease was just granted: this commit does not renew it and sets nothing else.
    seq = fenced_write(lease, [EventSpec("agentops.task.note")])

    assert seq == before + 1
    assert Event.objects.filter(task=task, seq=seq, action="agentops.task.note").exists()


def test_a_refused_step_transition_undoes_the_whole_commit(redis_clean):
    task, lease = claimed()
    step = Step.objects.get(task=task, ordinal=0)
    Step.objects.filter(pk=step.pk).update(status=StepStatus.SKIPPED)
    before = Task.objects.get(pk=task.pk)

    with (
        pytest.raises(CheckpointMismatch),
        fenced_commit(lease, [EventSpec("agentops.step.started", step=0)], current_step=1) as c,
    ):
        c.step(step, "start", required=True, attempts=1)

    after = Task.objects.get(pk=task.pk)
    assert (after.last_seq, after.current_step) == (before.last_seq, before.current_step)
    assert not Event.objects.filter(task=task, action="agentops.step.started").exists()


def test_a_stale_lease_writes_no_part_of_the_commit(redis_clean):
    task, lease = claimed()
    step = Step.objects.get(task=task, ordinal=0)
    Task.objects.filter(pk=task.pk).update(lease_epoch=lease.epoch + 1)

    with pytest.raises(LeaseLost), fenced_commit(lease, [EventSpec("x.y", step=0)]) as c:
        c.step_update(step, route="auto")
        c.call_create(
            task=task,
            step=step,
            tool="bench_echo",
            side_effect="read",
            args={},
            args_digest="d",
            idempotency_key=f"stale{task.pk}",
        )

    step.refresh_from_db()
    assert step.route == ""
    assert not ToolCall.objects.filter(task=task).exists()
    assert not Event.objects.filter(task=task, action="x.y").exists()


def test_a_commit_renews_the_lease_only_past_half_of_it(redis_clean):
    task, lease = claimed()
    granted = Task.objects.get(pk=task.pk).lease_expires_at

    fenced_write(lease, [EventSpec("agentops.task.note")])
    assert Task.objects.get(pk=task.pk).lease_expires_at == granted

    lease.renewed_at = time.monotonic() - 10_000
    fenced_write(lease, [EventSpec("agentops.task.note")])
    assert Task.objects.get(pk=task.pk).lease_expires_at > granted


def test_the_status_change_time_moves_only_with_the_status(redis_clean):
    """`status_changed_at` is set by commits that change the status (the stopped tasks' index
    orders by it), and left alone by the others, which still touch `updated_at`."""
    task, lease = claimed()
    claimed_at = Task.objects.values_list("status_changed_at", flat=True).get(pk=task.pk)
    assert claimed_at > task.status_changed_at

    fenced_write(lease, [EventSpec("agentops.step.model_result", step=0)], phase="model_result")
    row = Task.objects.values("status_changed_at", "updated_at").get(pk=task.pk)
    assert row["status_changed_at"] == claimed_at
    assert row["updated_at"] > claimed_at

    fenced_write(lease, [], transition="stop", failure={"kind": "tool_timeout"})
    stopped = Task.objects.get(pk=task.pk)
    assert stopped.status == "needs_attention"
    assert stopped.status_changed_at > row["updated_at"]


@pytest.fixture
def offloading(redis_clean, settings, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A claimed task, its first step and the artifact id its next artifact will take, with a
    100-byte artifact threshold and artifacts under tmp_path. The id is reserved beforehand:
    the sequence is read once per block of ids, not in every commit."""
    settings.MEDIA_ROOT = tmp_path
    settings.AGENTOPS = {**settings.AGENTOPS, "ARTIFACT_THRESHOLD_BYTES": 100}
    task, lease = claimed()
    step = Step.objects.get(task=task, ordinal=0)
    reserved = artifact_id_reserved()
    monkeypatch.setattr(commit_module, "artifact_id_reserved", lambda: reserved)
    return task, lease, step, reserved


def test_an_artifact_row_is_a_part_of_the_commit_statement(offloading):
    task, lease, step, reserved = offloading
    big = {"text": "x" * 500}
    sent: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record), fenced_commit(lease, []) as c:
        pointer = c.offloaded(big, path="step.output", task_id=task.pk)
        c.step_update(step, output=pointer)

    # One statement, in autocommit: no BEGIN, INSERT and COMMIT of its own for the artifact.
    assert len(sent) == 1 and not connection.in_atomic_block
    assert pointer["$artifact"] == reserved
    artifact = Artifact.objects.get(pk=reserved)
    assert artifact.task_id == task.pk and artifact.size == pointer["size"]
    assert artifact.content_type == "application/json"
    step.refresh_from_db()
    assert loaded(step.output) == big


def test_an_artifact_file_and_its_directory_are_durable_before_the_statement(
    offloading, monkeypatch
):
    task, lease, step, reserved = offloading
    order: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        order.append(f"fsync {'directory' if stat.S_ISDIR(os.fstat(fd).st_mode) else 'file'}")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with connection.execute_wrapper(statements_noted(order)), fenced_commit(lease, []) as c:
        pointer = c.offloaded({"text": "z" * 500}, path="step.output", task_id=task.pk)
        c.step_update(step, output=pointer)

    # The file and the directory that names it (fsynced at once), then the one statement with
    # its pointer.
    assert order.count("statement") == 1 and order[-1] == "statement"
    assert order.index("fsync file") < len(order) - 1
    assert sorted(order[-3:-1]) == ["fsync directory", "fsync file"]
    assert Artifact.objects.get(pk=reserved).name.endswith(".json")


def test_an_artifact_directory_is_fsynced_while_its_file_is(offloading, monkeypatch, settings):
    """The file's fsync does not end until its directory's has begun: they overlap (the old
    order, file then directory, would wait here and fail)."""
    task, lease, step, _ = offloading
    # The task's directory exists already: no fsync of its parent for a new one.
    os.makedirs(os.path.join(settings.MEDIA_ROOT, "artifacts", str(task.pk)))
    order: list[str] = []
    directory_begun = threading.Event()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            order.append("fsync directory")
            directory_begun.set()
        elif not directory_begun.wait(30):
            order.append("file durable before its directory's fsync began")
        else:
            order.append("file durable")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with connection.execute_wrapper(statements_noted(order)), fenced_commit(lease, []) as c:
        pointer = c.offloaded({"text": "v" * 500}, path="step.output", task_id=task.pk)
        c.step_update(step, output=pointer)

    assert order.count("file durable") == 1 and order[-2:] == ["file durable", "statement"], order
    assert order.index("fsync directory") < order.index("file durable")
    assert loaded(pointer) == {"text": "v" * 500}


def test_a_file_stored_twice_in_one_commit_is_fsynced_once_before_the_statement(
    offloading, monkeypatch
):
    task, lease, step, _ = offloading
    monkeypatch.setattr(commit_module, "artifact_id_reserved", artifact_id_reserved)
    order: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        order.append(f"fsync {'directory' if stat.S_ISDIR(os.fstat(fd).st_mode) else 'file'}")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    value = {"text": "w" * 500}
    with connection.execute_wrapper(statements_noted(order)), fenced_commit(lease, []) as c:
        output = c.offloaded(value, path="step.output", task_id=task.pk)
        result = c.offloaded(dict(value), path="tool_call.result", task_id=task.pk)
        c.step_update(step, output=output)

    # One file (the same content), fsynced once with its directory, then the statement.
    assert output["sha256"] == result["sha256"] and output["$artifact"] != result["$artifact"]
    assert order.count("fsync file") == 1 and order.count("statement") == 1
    assert sorted(order[-3:-1]) == ["fsync directory", "fsync file"] and order[-1] == "statement"
    assert loaded(output) == loaded(result) == value


def test_a_stale_lease_writes_no_artifact_row(redis_clean, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    settings.AGENTOPS = {**settings.AGENTOPS, "ARTIFACT_THRESHOLD_BYTES": 100}
    task, lease = claimed()
    Task.objects.filter(pk=task.pk).update(lease_epoch=lease.epoch + 1)

    with pytest.raises(LeaseLost), fenced_commit(lease, []) as c:
        c.offloaded({"text": "y" * 500}, path="step.output", task_id=task.pk)

    assert not Artifact.objects.filter(task=task).exists()


def test_reserved_artifact_ids_are_never_taken_by_another_row(redis_clean):
    task, _ = claimed()
    reserved = artifact_id_reserved()
    other = Artifact.objects.create(task=task, name="n", size=1, sha256="0" * 64)

    assert other.pk != reserved
    assert artifact_id_reserved() != reserved


def test_threads_of_one_process_reserve_distinct_artifact_ids(redis_clean):
    reserved: list[int] = []

    def reserve() -> None:
        try:
            reserved.extend(artifact_id_reserved() for _ in range(100))
        finally:
            connection.close()

    threads = [threading.Thread(target=reserve) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(reserved) == 400 and len(set(reserved)) == 400


def test_prepared_statements_survive_a_failed_step(redis_clean, settings):
    """A failed step parks its task for a retry in a commit, never a ROLLBACK (psycopg forgets
    every prepared statement on one): the next claim on the same connection still has them."""
    settings.AGENTOPS = {**settings.AGENTOPS, "BACKOFF_BASE_SECONDS": 0.0, "SLICE_SECONDS": 3600.0}
    bench_policy_ensure()
    task = task_create(
        agent="bench_noop",
        goal="bench",
        input={"steps": 4, "payload_kb": 0, "fail_every": 2},
        policy=BENCH_POLICY,
    )
    outcomes, prepared = [], []
    for _ in range(5):
        outcomes.append(task_advance(task_id=task.pk, owner="test"))
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM pg_prepared_statements")
            prepared.append({row[0] for row in cursor.fetchall()})
        if outcomes[-1] == "succeeded":
            break

    assert outcomes == ["retry scheduled", "retry scheduled", "succeeded"]
    assert prepared[0] and prepared[0] <= prepared[1] <= prepared[2]
