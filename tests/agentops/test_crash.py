"""Crash tests: a real worker process is SIGKILLed at a named point, then another takes over.

After the takeover the task must finish with every step completed exactly once, no recorded model
response requested again, and at most one remote effect per idempotency key.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db.models import Count

from agentops.dev.benchmarks.checkpoint import BENCH_POLICY, bench_policy_ensure
from agentops.dev.sim.models import Effect, Fault, FaultMode
from agentops.engine import task_create
from agentops.engine.jsonvalues import loaded
from agentops.engine.model import loaded_response
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

REFUND_STEP = 3


def model_calls(processes) -> Counter[int]:
    path = Path(processes.env["AGENTOPS_MODEL_CALL_LOG"])
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(json.loads(line)["step"] for line in lines)


def assert_finished_once(task: Task, processes, *, asked_again: int | None = None) -> None:
    """`asked_again`: a read-only step the worker was killed in before its one commit, whose
    model call was made again (nothing of it was recorded)."""
    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    steps = list(task.steps.order_by("ordinal"))
    assert [s.status for s in steps] == [StepStatus.SUCCEEDED] * 5
    completions = Counter(
        Event.objects.filter(task=task, action="agentops.step.completed").values_list(
            "step_ordinal", flat=True
        )
    )
    assert completions == {i: 1 for i in range(5)}
    assert model_calls(processes) == {i: 2 if i == asked_again else 1 for i in range(5)}
    live = ToolCall.objects.filter(task=task).exclude(status=LedgerStatus.FAILED)
    assert live.count() == 5
    assert set(live.values_list("status", flat=True)) == {LedgerStatus.SUCCEEDED}
    per_key = Effect.objects.values("idempotency_key").annotate(n=Count("id"))
    assert max(row["n"] for row in per_key) == 1
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    assert Effect.objects.filter(service="email", operation="send").count() == 1
    assert task.recoveries == 1


def crash_then_recover(processes, crash_at: str, **env: str) -> Task:
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    victim = processes.worker(crash_at=crash_at, extra_env=env)
    assert victim.wait(timeout=60) == -9, "the worker should have been killed at " + crash_at
    take_over(processes, task)
    return task


def take_over(processes, task: Task) -> None:
    """A new worker and the sweeper finish the task the killed worker left."""
    processes.worker()
    processes.sweeper()
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_terminal,
        timeout=60,
        message="the task to finish after the takeover",
    )


@pytest.mark.parametrize(
    "crash_at",
    [
        "after_claim",
        f"after_model_result@{REFUND_STEP}",
        f"after_pending@{REFUND_STEP}",
        f"after_tool_call@{REFUND_STEP}",
    ],
)
def test_worker_killed_at_a_named_point_resumes_without_repeating_work(processes, crash_at):
    """The refund (step 3) has a side effect: its pending row commits before it runs, and
    whatever point the worker dies at, the refund happens once and no model call repeats."""
    task = crash_then_recover(processes, crash_at)

    assert_finished_once(task, processes)
    assert Event.objects.filter(
        task=task, step_ordinal=REFUND_STEP, action="agentops.ledger.pending"
    ).exists()


def test_worker_killed_after_a_read_before_the_steps_one_commit_reads_again(processes):
    """A read-only step commits once, after its read: a worker killed between the read and that
    commit leaves nothing of the step, so the next one asks the model and reads again (harmless:
    nothing changed anywhere), records the call once, and the side effects still happen once."""
    reads = Fault.objects.create(
        service="orders", operation="lookup", mode=FaultMode.SLOW, delay_seconds=0.01, remaining=9
    )
    task = crash_then_recover(processes, "after_tool_call@0")

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    reads.refresh_from_db()
    assert reads.remaining == 9 - 2, "the order was looked up twice"
    assert model_calls(processes) == {0: 2, 1: 1, 2: 1, 3: 1, 4: 1}
    lookup = ToolCall.objects.get(task=task, tool="lookup_order")
    assert lookup.status == LedgerStatus.SUCCEEDED
    assert not Event.objects.filter(
        task=task, step_ordinal=0, action="agentops.ledger.pending"
    ).exists()
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    assert Effect.objects.filter(service="email", operation="send").count() == 1


def test_worker_killed_after_a_large_proposal_runs_it_exactly_once(processes):
    """The pending row and the step's record (pointing at the arguments' artifact) committed,
    the tool (with a side effect) never ran: the next worker runs exactly the recorded
    arguments."""
    bench_policy_ensure()
    task = task_create(
        agent="bench_noop",
        goal="big",
        input={"steps": 2, "payload_kb": 300, "kind": "effect"},
        policy=BENCH_POLICY,
    )
    victim = processes.worker(crash_at="after_model_result@1")
    assert victim.wait(timeout=60) == -9
    call = ToolCall.objects.get(task=task, step__ordinal=1)
    assert call.status == LedgerStatus.PENDING
    take_over(processes, task)

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert model_calls(processes) == {0: 1, 1: 1}
    step = Step.objects.get(task=task, ordinal=1)
    proposed = loaded_response(step.model_response)["tool_calls"][0]["arguments"]
    assert proposed["n"] == 1 and len(proposed["payload"]) == 300 * 1024
    assert loaded(ToolCall.objects.get(pk=call.pk).args) == proposed
    assert loaded(step.output) == {"n": 1, "payload": proposed["payload"]}


def test_worker_killed_while_writing_a_snapshot_resumes_without_repeating_work(processes):
    task = crash_then_recover(processes, "during_snapshot", AGENTOPS_SNAPSHOT_EVERY="2")

    # The snapshot is due in step 1's completion, the one commit of a read-only step: killed
    # before it, the step left nothing, and its model call was made again.
    assert_finished_once(task, processes, asked_again=1)
    # The snapshot's transaction died with the worker: step 2 completed in the new worker.
    assert Event.objects.filter(task=task, action="agentops.task.claimed").count() == 2


def test_worker_killed_during_the_tool_call_finds_the_effect_by_probe(processes):
    Fault.objects.create(
        service="payments", operation="refund", mode=FaultMode.SLOW, delay_seconds=3.0
    )
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    victim = processes.worker()
    wait_for(
        lambda: Effect.objects.filter(service="payments").exists(),
        message="the refund to reach the payments service",
    )
    victim.kill()
    victim.wait(timeout=10)
    Fault.objects.filter(service="payments").update(mode=FaultMode.OK)
    assert ToolCall.objects.get(task=task, tool="issue_refund").status == LedgerStatus.PENDING

    take_over(processes, task)

    assert_finished_once(task, processes)
    assert (
        Event.objects.filter(
            task=task, action="agentops.ledger.succeeded", payload__how="probe found the effect"
        ).count()
        == 1
    )


def stopped_after_kills(processes, task: Task, *, crash_at: str, kills: int) -> None:
    """Kill a worker at `crash_at` `kills` times in a row (a sweeper beside each re-drives the
    task), then run a healthy worker and sweeper until the task stops for a person."""
    for _ in range(kills):
        victim = processes.worker(crash_at=crash_at)
        victim_sweeper = processes.sweeper()
        assert victim.wait(timeout=60) == -9
        victim_sweeper.kill()
    processes.worker()
    processes.sweeper()
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.NEEDS_ATTENTION,
        timeout=60,
        message=f"the task to stop after {kills} workers were killed at {crash_at}",
    )


def test_a_crash_loop_stops_at_the_recovery_cap(processes):
    task = task_create(
        agent="refund", goal="Refund order A1001", input={"order_id": "A1001"}, recovery_cap=2
    )
    stopped_after_kills(processes, task, crash_at="after_claim", kills=3)

    task.refresh_from_db()
    assert task.failure["kind"] == "process_crash"
    assert task.recoveries == 3
    assert not Step.objects.filter(task=task).exclude(status=StepStatus.PENDING).exists()
    assert not Effect.objects.exists()


@pytest.mark.parametrize("crash_at", ["rollback_after_pending@1", "rollback_after_tool_call@1"])
def test_worker_killed_mid_rollback_cancels_the_flight_exactly_once(processes, crash_at):
    from agentops.dev.sim.services import fault_set
    from agentops.engine import task_rollback

    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    task = task_create(agent="trip", goal="Trip", input={"traveller": "Ada"})
    processes.worker()
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.NEEDS_ATTENTION,
        message="the trip to stop at the hotel",
    )
    processes.stop_all()

    task_rollback(task_id=task.pk, actor=None)
    victim = processes.worker(crash_at=crash_at)
    assert victim.wait(timeout=60) == -9
    processes.worker()
    processes.sweeper()
    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.ROLLED_BACK,
        timeout=60,
        message="the rollback to finish after the takeover",
    )

    assert Effect.objects.filter(service="flights", operation="cancel").count() == 1
    flight = ToolCall.objects.get(task=task, tool="book_flight")
    assert flight.status == LedgerStatus.COMPENSATED
    assert (
        ToolCall.objects.filter(compensation_of=flight, status=LedgerStatus.SUCCEEDED).count() == 1
    )


def _process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_worker_frozen_inside_a_transaction_is_cut_off_and_another_finishes_the_task(
    processes,
):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    frozen = processes.worker(
        crash_at=f"inside_step_complete@{REFUND_STEP}",
        extra_env={
            "AGENTOPS_CRASH_SIGNAL": "SIGSTOP",
            # The server cuts off a transaction left idle this long, releasing its row locks.
            "AGENTOPS_DB_IDLE_IN_TRANSACTION_TIMEOUT": "2s",
        },
    )
    wait_for(lambda: _process_state(frozen.pid) == "T", message="the worker to freeze")
    frozen_at = time.monotonic()
    processes.worker()
    processes.sweeper()
    # The frozen worker's locks are released only by the server's cut-off (it stays frozen until
    # after this wait): a task that finishes was not blocked by them. Without the cut-off it
    # never would; with it, lease (2 s) + idle cut-off (2 s) + sweep and grace (1.3 s) and the
    # remaining steps, at the machine's pace, so the limit is against a hang only.
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_terminal,
        timeout=120,
        message="another worker to finish the task",
    )
    print(f"taken over and finished {time.monotonic() - frozen_at:.1f} s after the freeze")
    events = Event.objects.filter(task=task).count()
    os.kill(frozen.pid, signal.SIGCONT)
    time.sleep(3)  # the resumed worker finds its session gone and its lease taken

    assert Event.objects.filter(task=task).count() == events
    assert_finished_once(task, processes)


def test_a_step_whose_every_try_was_killed_stops_as_a_crash_and_a_retry_finishes_it(processes):
    """The refund step's own cap is 2: its worker killed in both tries (after the call, before
    the step's completion commits) stops the task as a process crash that says the last try did
    not finish; a person's retry finishes the step with the same key, and the refund happens
    once."""
    from agentops.engine import task_retry

    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    stopped_after_kills(processes, task, crash_at=f"inside_step_complete@{REFUND_STEP}", kills=2)

    task.refresh_from_db()
    assert task.failure["kind"] == "process_crash"
    assert task.failure["detail"]["unfinished"] is True
    assert task.failure["message"].startswith(
        "step 4 was attempted 2 times (tool issue_refund's own cap 2); its last try did not finish"
    )
    refund_step = Step.objects.get(task=task, ordinal=REFUND_STEP)
    assert (refund_step.status, refund_step.attempts) == (StepStatus.RUNNING, 2)
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1

    task_retry(task_id=task.pk, actor=None, reason="the workers' memory limit was raised")
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_terminal,
        timeout=60,
        message="the retried task to finish",
    )
    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
