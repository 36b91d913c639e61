"""The fleet's stop button with real worker processes: tasks mid-run when the stop comes stop at
safe points, with no tool call after their stop and at most the one already on its way; nothing
is claimed while it is in force; a tool's stop stops only the steps about to call that tool;
resuming finishes every task with each effect once."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db.models import Count

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.dev.sim.world import order
from agentops.engine import task_create
from agentops.models import Event, SweepLease, Task
from agentops.states import TERMINAL, TaskStatus
from reviews.models import Decision
from reviews.services.stops import fleet_resume_apply, fleet_stop_apply
from tests.conftest import database_url, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

# Refunds the default policy lets through (100 or less): no gate stops them.
ORDERS = [f"S{n}" for n in range(1000, 1400) if order(f"S{n}")["amount"] <= 100][:7]
SLOW = [
    ("orders", "lookup"),
    ("eligibility", "check"),
    ("logistics", "track"),
    ("payments", "refund"),
    ("email", "send"),
]
# The events that record a tool call: a write's `pending` row before it, any call's step end.
CALL_EVENTS = ("agentops.ledger.pending", "agentops.step.completed", "agentops.step.failed")


@pytest.fixture
def stopper(db: Any) -> User:
    user = User.objects.create_user("stella")
    user.user_permissions.add(Permission.objects.get(codename="stop_fleet"))
    return User.objects.get(pk=user.pk)


def refund_task(order_id: str) -> Task:
    return task_create(
        agent="refund",
        goal=f"Refund order {order_id}",
        input={"order_id": order_id, "reason": "damaged", "model_seconds": 0.1},
    )


def calls_in_window(task_ids: list[int], *, after_seq: dict[int, int]) -> Counter[int]:
    """Per task, the tool calls (steps) it recorded after `after_seq[task]` of its log."""
    rows = Event.objects.filter(task_id__in=task_ids, action__in=CALL_EVENTS).values_list(
        "task_id", "step_ordinal", "seq"
    )
    return Counter(
        task for task, step in {(t, s) for t, s, seq in rows if seq > after_seq.get(t, 1 << 30)}
    )


def sweeps_after(moment: Any, count: int) -> None:
    """Wait until the sweeper has ended `count` sweeps that began after `moment`."""
    seen: list[Any] = []

    def swept() -> bool:
        ended = SweepLease.objects.filter(pk=1).values_list("expires_at", flat=True).first()
        if ended is not None and ended > moment and ended not in seen:
            seen.append(ended)
        return len(seen) > count  # the first one seen may have begun before `moment`

    wait_for(swept, timeout=30, interval=0.05, message=f"{count} sweeps")


def test_a_stop_of_every_task_halts_tasks_mid_run_at_safe_points_and_resume_finishes_them(
    processes, stopper
):
    for service, operation in SLOW:
        fault_set(service=service, operation=operation, mode="slow", delay=0.3)
    tasks = [refund_task(order_id) for order_id in ORDERS[:6]]
    ids = [t.pk for t in tasks]
    workers = [processes.worker() for _ in range(4)]
    sweeper = processes.sweeper()

    def mid_run() -> bool:
        running = Task.objects.filter(pk__in=ids, status=TaskStatus.RUNNING)
        done_a_step = Event.objects.filter(task__in=running, action="agentops.step.completed")
        return done_a_step.values("task_id").distinct().count() == 4

    with processes.logs_on_failure(*workers):
        wait_for(mid_run, timeout=60, interval=0.02, message="four tasks mid-run")

    made = fleet_stop_apply(scope="all", reason="refunds look wrong", actor=stopper)
    seqs_at_stop = dict(Task.objects.filter(pk__in=ids).values_list("id", "last_seq"))

    assert len(made.running) == 4 and len(made.paused) == 2
    wait_for(
        lambda: not Task.objects.filter(pk__in=ids, status=TaskStatus.RUNNING).exists(),
        timeout=30,
        message="every running task to reach a safe point",
    )
    pauses = dict(
        Event.objects.filter(
            task_id__in=ids, action="agentops.task.paused", payload__stop=made.stop.pk
        ).values_list("task_id", "seq")
    )
    # Every task is paused by the stop (none was on its last step with four to go).
    assert set(pauses) == set(ids)
    halted = Event.objects.filter(task_id__in=made.running, action="agentops.step.halted")
    assert sorted(halted.values_list("task_id", flat=True)) == sorted(made.running)
    assert {e.payload["phase"] for e in halted} <= {"before_model_call", "before_tool_call"}
    # What each task did between the stop and its pause: at most the call on its way.
    in_flight = calls_in_window(ids, after_seq=seqs_at_stop)
    assert max(in_flight.values(), default=0) <= 1

    # Held: a task started now is not claimed, by its own job nor by the sweeper's.
    late = refund_task(ORDERS[6])
    # Sweeps that began once it had sat past the grace period (process_env: 1 s) would have
    # re-driven it, were it not held.
    sweeps_after(Task.objects.get(pk=late.pk).created_at + timedelta(seconds=1), 2)
    assert Task.objects.get(pk=late.pk).status == TaskStatus.QUEUED
    all_ids = [*ids, late.pk]
    assert calls_in_window(all_ids, after_seq=pauses) == Counter()
    assert not Event.objects.filter(task_id=late.pk, action="agentops.task.claimed").exists()

    lifted = fleet_resume_apply(stop_id=made.stop.pk, reason="fixed", actor=stopper)

    assert sorted(lifted.resumed) == sorted(ids) and lifted.released == [late.pk]
    with processes.logs_on_failure(*workers, sweeper):
        wait_for(
            lambda: all(t.status in TERMINAL for t in Task.objects.filter(pk__in=all_ids)),
            timeout=120,
            message="every task to finish after the resume",
        )
    statuses = Counter(Task.objects.filter(pk__in=all_ids).values_list("status", flat=True))
    assert statuses == Counter({TaskStatus.SUCCEEDED: 7})
    per_key = Effect.objects.values("idempotency_key").annotate(n=Count("id"))
    assert {row["n"] for row in per_key} == {1}
    assert Effect.objects.filter(service="payments", operation="refund").count() == 7
    assert Effect.objects.filter(service="email", operation="send").count() == 7


def test_a_tool_stop_stops_only_the_steps_about_to_call_that_tool(processes, stopper):
    made = fleet_stop_apply(
        scope="tool", target="issue_refund", reason="the payments API is wrong", actor=stopper
    )
    refunds = [refund_task(order_id) for order_id in ORDERS[:3]]
    echo = task_create(agent="bench_noop", goal="Echo", input={"steps": 3, "payload_kb": 1})
    workers = [processes.worker() for _ in range(2)]

    with processes.logs_on_failure(*workers):
        wait_for(
            lambda: (
                Task.objects.filter(
                    pk__in=[t.pk for t in refunds], status=TaskStatus.PAUSED
                ).count()
                == 3
                and Task.objects.get(pk=echo.pk).status == TaskStatus.SUCCEEDED
            ),
            timeout=90,
            message="the refunds to pause before their refund and the echo to finish",
        )

    halted = Event.objects.filter(task__in=refunds, action="agentops.step.halted")
    assert [(e.step_ordinal, e.payload) for e in halted] == [
        (3, {"stop": made.stop.pk, "phase": "before_tool_call", "tool": "issue_refund"})
    ] * 3
    assert not Effect.objects.filter(service="payments").exists()
    assert Effect.objects.filter(service="email").count() == 0
    # Their lookups, checks and tracking ran: three steps each.
    done = Event.objects.filter(task__in=refunds, action="agentops.step.completed")
    assert Counter(done.values_list("task_id", flat=True)) == Counter({t.pk: 3 for t in refunds})

    fleet_resume_apply(stop_id=made.stop.pk, actor=stopper)

    ids = [t.pk for t in refunds]
    with processes.logs_on_failure(*workers):
        wait_for(
            lambda: all(t.status == TaskStatus.SUCCEEDED for t in Task.objects.filter(pk__in=ids)),
            timeout=90,
            message="the refunds to finish after the resume",
        )
    assert Effect.objects.filter(service="payments", operation="refund").count() == 3
    per_key = Effect.objects.values("idempotency_key").annotate(n=Count("id"))
    assert {row["n"] for row in per_key} == {1}
    # The refund step's proposal was kept at the stop: its model was asked once.
    asked = Event.objects.filter(task__in=refunds, action="agentops.step.model_result")
    assert Counter(asked.values_list("task_id", "step_ordinal")) == Counter(
        {(t, s): 1 for t in ids for s in range(5)}
    )


def test_demo_scenario_fleet_stop_stops_four_busy_workers_at_safe_points_within_the_target(
    sim_server, redis_clean, monkeypatch
):
    """`manage.py demo_scenario fleet-stop --json`: four workers, the stop and its lift through
    the API. The target (issue #41) is at most 2 s from the stop to the last tool call."""
    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()

    call_command("demo_scenario", "fleet-stop", "--json", "--timeout", "120", stdout=out)

    report = json.loads(out.getvalue())
    # Each worker held a task mid-run; at the stop, a task whose lease had run out (a loaded
    # machine's heartbeat late) is paused by the stop itself, the others at their safe points.
    # The seconds from the stop to the last tool call are the scenario's figure to read (0.1 to
    # 0.2 s on a quiet machine, docs/operations.md), not a bound a loaded machine must meet.
    assert report["workers"] == 4 and report["running_at_stop"] <= 4
    assert report["running_at_stop"] + report["paused_by_stop"] >= 4
    assert report["halted_at_safe_points"] <= report["running_at_stop"]
    assert report["tool_calls_after_stop"] == 0
    assert report["in_flight_per_task_max"] <= 1
    assert report["claims_during_stop"] == 0
    assert report["task_created_during_stop"]["status_during_stop"] == TaskStatus.QUEUED
    assert report["every_task_finished_after_resume"] is True
    assert report["statuses"] == {TaskStatus.SUCCEEDED: 9}
    assert report["refunds"] == 9 and report["effects_per_key_max"] == 1
    # What the stop paused comes back with the lift; a running task whose lease ran out before
    # its safe point (a loaded machine's late heartbeat) is the sweeper's once the stop lifts,
    # and finished too (above).
    assert (
        report["paused_by_stop"]
        <= report["resumed"]
        <= report["paused_by_stop"] + report["running_at_stop"]
    )
    decisions = Decision.objects.filter(action__startswith="reviews.fleet").order_by("id")
    assert [(d.action, d.actor_label, d.channel) for d in decisions] == [
        ("reviews.fleet.stopped", "stella", "api"),
        ("reviews.fleet.resumed", "stella", "api"),
    ]
