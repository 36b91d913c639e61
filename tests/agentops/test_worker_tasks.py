"""A worker that advances several tasks at once (`worker --tasks N`): the tasks' model calls are
in flight together, a call waiting on its model holds no database connection, and a SIGKILL that
lands in the calls in flight loses no task and repeats no effect."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import pytest
from django.db.models import Count

from agentops.dev.sim.models import Effect
from agentops.dev.sim.world import order
from agentops.engine import task_create
from agentops.models import Event, Task
from agentops.states import TaskStatus
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

# Refunds the default policy lets through (100 or less): no gate stops them.
UNGATED_ORDERS = [f"C{n}" for n in range(1000, 1400) if order(f"C{n}")["amount"] <= 100][:4]


def held_by(pid: int) -> int:
    """Tasks the worker process `pid` (of this host) holds now."""
    return Task.objects.filter(
        status=TaskStatus.RUNNING, lease_owner__startswith=f"{socket.gethostname()}:{pid}:"
    ).count()


def model_calls(processes) -> list[dict[str, int]]:
    """The model calls the workers started, in order (AGENTOPS_MODEL_CALL_LOG)."""
    path = Path(processes.env["AGENTOPS_MODEL_CALL_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_three_tasks_make_their_model_calls_at_once_through_one_database_connection(processes):
    """One database slot for three tasks: each task's steps wait two seconds on the model. Had
    a waiting call kept the slot, no second task could even be claimed before the first ended
    (the claim is a database write): their runs would follow one another."""
    tasks = [
        task_create(
            agent="bench_noop",
            goal=f"Echo {n}",
            input={"steps": 2, "model_seconds": 2, "payload_kb": 1},
        )
        for n in range(3)
    ]
    worker = processes.start(
        "worker", "--tasks", "3", extra_env={"AGENTOPS_WORKER_DB_SLOTS": "1"}, name="worker"
    )

    wait_for(
        lambda: all(
            t.status == TaskStatus.SUCCEEDED
            for t in Task.objects.filter(pk__in=[t.pk for t in tasks])
        ),
        timeout=120,
        message="the three tasks to succeed",
    )

    done = list(Task.objects.filter(pk__in=[t.pk for t in tasks]))
    assert max(t.started_at for t in done) < min(t.finished_at for t in done)
    claims = Event.objects.filter(task__in=done, action="agentops.task.claimed")
    processes_seen = {e.payload["owner"].rsplit(":", 1)[0] for e in claims}  # less the job id
    assert len(processes_seen) == 1
    assert processes_seen.pop().startswith(f"{socket.gethostname()}:{worker.pid}:")
    assert "3 tasks at once" in processes.log(worker)


def test_a_worker_killed_with_its_model_calls_in_flight_loses_no_task_and_repeats_no_effect(
    processes,
):
    tasks = [
        task_create(
            agent="refund",
            goal=f"Refund order {order_id}",
            input={"order_id": order_id, "reason": "damaged", "model_seconds": 3},
        )
        for order_id in UNGATED_ORDERS
    ]
    victim = processes.start("worker", "--tasks", "4", name="worker")
    wait_for(
        lambda: held_by(victim.pid) == len(tasks) and len(model_calls(processes)) == len(tasks),
        interval=0.05,
        timeout=120,
        message="the worker to hold the four tasks, each in its first model call",
    )

    victim.kill()
    assert victim.wait(timeout=60) == -9
    processes.start("worker", "--tasks", "4", name="worker")
    processes.sweeper()
    wait_for(
        lambda: all(t.is_terminal for t in Task.objects.filter(pk__in=[t.pk for t in tasks])),
        timeout=180,
        message="the four tasks to finish after the takeover",
    )

    done = Task.objects.filter(pk__in=[t.pk for t in tasks])
    assert [t.status for t in done] == [TaskStatus.SUCCEEDED] * 4
    # Held by the killed worker (one may have been between two slices at the kill).
    assert {t.recoveries for t in done} <= {0, 1} and sum(t.recoveries for t in done) >= 3
    per_key = Effect.objects.values("idempotency_key").annotate(n=Count("id"))
    assert max(row["n"] for row in per_key) == 1
    assert Effect.objects.filter(service="payments", operation="refund").count() == 4
    completions = Counter(
        Event.objects.filter(task__in=done, action="agentops.step.completed").values_list(
            "task_id", "step_ordinal"
        )
    )
    assert set(completions.values()) == {1}
    asked = Counter((call["task"], call["step"]) for call in model_calls(processes))
    assert set(asked) == set(completions)  # every completed step's model was asked...
    assert sum(asked.values()) > len(asked)  # ...and the calls the kill cut short again
