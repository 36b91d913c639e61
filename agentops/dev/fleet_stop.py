"""`demo_scenario fleet-stop`: the fleet's stop button under load, end to end with real workers.

Four workers run eight refunds against the simulated services (every call answers slowly, so
calls are in flight when the stop comes). Once each worker holds a task mid-run, a holder of
the stop permission (`stella`) stops every task through the JSON API, as anyone would (a
decision in the log); a task created during the stop waits unclaimed; she lifts the stop and
every task finishes. The
report measures, from the tasks' own logs (database clock):

- `stop_to_last_tool_call_seconds`: from the stop's commit to the last tool call recorded
  before the resume (a call already sent when the stop came finishes and is recorded);
- `tool_calls_after_stop`: calls a task made after it reached its safe point and paused (a
  pending row written, or a step completed, after its pause and before its resume): 0;
- `in_flight_at_stop`: calls that were on their way at the stop and finished after it (at most
  one per task);
- `claims_during_stop`, and every task's status after the resume, with the effects per key.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib.auth.models import Permission
from django.db import connection
from django.db.models import Count, Q

from agentops.dev.devstack import Stack, free_port
from agentops.dev.people import Api, Person, people, web
from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_reset, fault_set
from agentops.dev.sim.world import order
from agentops.engine import task_create
from agentops.models import Event, FleetStop, Task
from agentops.states import TERMINAL, TaskStatus

FLEET_STOP_SCENARIO = "fleet-stop"
WORKERS = 4
TASKS = 8
# Every endpoint a refund calls answers after this long (the `slow` fault), and the scripted
# model takes this long per call: calls are in flight whenever the stop comes.
CALL_SECONDS = 0.3
MODEL_SECONDS = 0.1
# Refunds the default policy lets through (100 EUR or less): no gate stops them.
ORDERS = [f"F{n}" for n in range(1000, 1600) if order(f"F{n}")["amount"] <= 100][: TASKS + 1]
ENDPOINTS = [
    ("orders", "lookup"),
    ("eligibility", "check"),
    ("logistics", "track"),
    ("payments", "refund"),
    ("email", "send"),
]
TOOL_CALL_EVENTS = ("agentops.ledger.pending", "agentops.step.completed", "agentops.step.failed")
CLAIMED = "agentops.task.claimed"


def _api(api: Api, person: Person, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = api.call(person, "POST", path, body)
    if answer.status_code not in (200, 201):
        raise RuntimeError(f"POST {path}: {answer.status_code} {answer.text}")
    return answer.json()  # type: ignore[no-any-return]


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (now,) = cursor.fetchone()
    return now  # type: ignore[no-any-return]


def _wait(check: Callable[[], Any], *, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not happen within {seconds:g} s")


def _mid_run(ids: list[int]) -> bool:
    """Every worker holds a task that has completed a step (it is mid-run)."""
    running = Task.objects.filter(pk__in=ids, status=TaskStatus.RUNNING)
    started = (
        Event.objects.filter(task__in=running, action="agentops.step.completed")
        .values("task_id")
        .distinct()
        .count()
    )
    return started >= WORKERS


def _keys_of(ids: list[int]) -> Q:
    """The simulated services' effects of these tasks (their request keys start `t<id>-`)."""
    keys = Q(pk__in=[])
    for task_id in ids:
        keys |= Q(request_key__startswith=f"t{task_id}-")
    return keys


def fleet_stop_run(*, timeout: float = 120.0) -> dict[str, Any]:
    stack = Stack(quiet=True)
    stack.env.update(AGENTOPS_SWEEP_INTERVAL_SECONDS="0.5", AGENTOPS_TOOL_TIMEOUT_SECONDS="5")
    try:
        stack.start_sim(free_port())
        with people({"stella": ()}) as cast, web(stack) as api:
            stella = cast["stella"]
            stella.user.user_permissions.add(Permission.objects.get(codename="stop_fleet"))
            return _run(stack, api, stella, timeout=timeout)
    finally:
        stack.stop()
        fault_reset()


def _run(stack: Stack, api: Api, stella: Person, *, timeout: float) -> dict[str, Any]:
    for service, operation in ENDPOINTS:
        fault_set(service=service, operation=operation, mode="slow", delay=CALL_SECONDS)
    tasks = [
        task_create(
            agent="refund",
            goal=f"Refund order {order_id} (fleet-stop demo)",
            input={"order_id": order_id, "reason": "damaged", "model_seconds": MODEL_SECONDS},
        )
        for order_id in ORDERS[:TASKS]
    ]
    ids = [t.pk for t in tasks]
    for _ in range(WORKERS):
        stack.spawn("worker")
    stack.spawn("sweeper")
    _wait(lambda: _mid_run(ids), seconds=timeout, what="four tasks mid-run")

    made = _api(
        api,
        stella,
        "/stops",
        {"scope": "all", "reason": "fleet-stop demo: refunds look wrong"},
    )
    stopped_at = db_now()
    _wait(
        lambda: not Task.objects.filter(pk__in=ids, status=TaskStatus.RUNNING).exists(),
        seconds=timeout,
        what="every running task to reach a safe point",
    )
    halted_at = db_now()
    late = task_create(
        agent="refund",
        goal=f"Refund order {ORDERS[TASKS]} (created during the stop)",
        input={"order_id": ORDERS[TASKS], "reason": "damaged"},
    )
    ids.append(late.pk)
    # Past the sweeper's grace and two of its sweeps: a queued task would have been re-driven.
    time.sleep(2 * 0.5 + 1.0)
    late_status = Task.objects.get(pk=late.pk).status
    resumed_at = db_now()
    stop = FleetStop.objects.get(pk=made["stop"]["id"])
    lifted = _api(api, stella, f"/stops/{stop.pk}/resume", {"reason": "fleet-stop demo: fixed"})
    _wait(
        lambda: all(t.status in TERMINAL for t in Task.objects.filter(pk__in=ids)),
        seconds=timeout,
        what="every task to finish after the resume",
    )
    report = _report(
        ids=ids,
        stop=stop,
        paused=made["paused"],
        running=made["running"],
        resumed=lifted["resumed"],
        released=lifted["released"],
        stopped_at=stopped_at,
        halted_at=halted_at,
        resumed_at=resumed_at,
    )
    report["task_created_during_stop"] = {"task": late.pk, "status_during_stop": late_status}
    return report


def _report(
    *,
    ids: list[int],
    stop: FleetStop,
    paused: list[int],
    running: list[int],
    resumed: list[int],
    released: list[int],
    stopped_at: datetime,
    halted_at: datetime,
    resumed_at: datetime,
) -> dict[str, Any]:
    window = Event.objects.filter(
        task_id__in=ids, created_at__gte=stopped_at, created_at__lt=resumed_at
    )
    pauses = dict(
        Event.objects.filter(
            task_id__in=ids, action="agentops.task.paused", payload__stop=stop.pk
        ).values_list("task_id", "seq")
    )
    # One tool call per step (a refund's steps each make one): its pending row (a write's)
    # and its step's end are the same call.
    events = window.filter(action__in=TOOL_CALL_EVENTS).values_list(
        "task_id", "step_ordinal", "seq", "created_at"
    )
    after = {(t, step) for t, step, seq, _ in events if t in pauses and seq > pauses[t]}
    on_their_way = {(t, step) for t, step, seq, _ in events if (t, step) not in after}
    in_flight = Counter(t for t, _ in on_their_way)
    last = max((at for *_, at in events), default=None)
    halts = window.filter(action="agentops.step.halted")
    claims = Event.objects.filter(
        task_id__in=ids, action=CLAIMED, created_at__gte=halted_at, created_at__lt=resumed_at
    ).count()
    effects = Effect.objects.filter(_keys_of(ids))
    per_key = effects.values("idempotency_key").annotate(n=Count("id"))
    statuses = Counter(Task.objects.filter(pk__in=ids).values_list("status", flat=True))
    refunds = effects.filter(service="payments", operation="refund").count()
    return {
        "workers": WORKERS,
        "tasks": len(ids),
        "stop": {"id": stop.pk, "scope": stop.scope, "reason": stop.reason},
        "paused_by_stop": len(paused),
        "running_at_stop": len(running),
        "halted_at_safe_points": halts.count(),
        "halts_by_phase": dict(Counter(halts.values_list("payload__phase", flat=True))),
        "stop_to_last_tool_call_seconds": round((last - stopped_at).total_seconds(), 3)
        if last is not None
        else 0.0,
        "stop_to_all_halted_seconds": round((halted_at - stopped_at).total_seconds(), 3),
        "in_flight_at_stop": sum(in_flight.values()),
        "in_flight_per_task_max": max(in_flight.values(), default=0),
        "tool_calls_after_stop": len(after),
        "claims_during_stop": claims,
        "resumed": len(resumed),
        "released": len(released),
        "every_task_finished_after_resume": statuses == Counter({TaskStatus.SUCCEEDED: len(ids)}),
        "statuses": dict(statuses),
        "refunds": refunds,
        "effects_per_key_max": max((row["n"] for row in per_key), default=0),
    }
