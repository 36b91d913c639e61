"""Subtasks and step dependencies: fan-out to child tasks, parking, waking, recovery.

In-process tests advance tasks like a worker would; the process tests run real workers (and kill
them) and count completions, wake-ups and remote effects per idempotency key.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.db.models import Count

from agentops.dev.sim.models import Effect, Fault, FaultMode
from agentops.dev.sim.services import fault_set
from agentops.engine import (
    task_abort,
    task_create,
    task_pause,
    task_resume,
    task_retry,
    task_rollback,
    task_skip_step,
)
from agentops.engine.planning import PlanInvalid, dependants, plan_check
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.builders import run_until_parked_or_done
from tests.conftest import wait_for
from tests.statuses import status_walk

pytestmark = pytest.mark.django_db


def procurement(**input_overrides) -> Task:
    return task_create(
        agent="procurement",
        goal="Buy 10 bolts from the cheapest supplier",
        input={"item": "bolts", "quantity": 10, **input_overrides},
    )


def run_family(parent: Task, *, rounds: int = 6) -> Task:
    """Advance the parent and its children in-process until nothing moves."""
    for _ in range(rounds):
        run_until_parked_or_done(parent)
        for child in Task.objects.filter(parent=parent).order_by("id"):
            run_until_parked_or_done(child)
    parent.refresh_from_db()
    return parent


def completions(task: Task) -> Counter[int]:
    return Counter(
        Event.objects.filter(task=task, action="agentops.step.completed").values_list(
            "step_ordinal", flat=True
        )
    )


def wakes(task: Task) -> int:
    return Event.objects.filter(task=task, action="agentops.task.woken").count()


def quotes_per_key() -> Counter[str]:
    return Counter(
        Effect.objects.filter(service="suppliers", operation="quote").values_list(
            "idempotency_key", flat=True
        )
    )


# -- dependencies ------------------------------------------------------------------------------


def test_plan_check_refuses_a_dependency_on_a_later_step():
    plan_check([(), (0,), (0, 1)])
    with pytest.raises(PlanInvalid, match="step 2 depends on step 3"):
        plan_check([(), (2,), ()])


def test_dependants_are_transitive():
    trip = task_create(agent="trip", goal="Trip", input={})
    steps = list(trip.steps.order_by("ordinal"))

    # search -> book flight -> itinerary; the hotel (2) depends on nothing, nothing on it.
    assert dependants(steps, 0) == [1, 3]
    assert dependants(steps, 1) == [3]
    assert dependants(steps, 2) == []


def test_skipping_a_step_skips_the_steps_that_depend_on_it(sim, redis_clean):
    fault_set(service="flights", operation="book", mode="forbidden", count=1)
    task = run_until_parked_or_done(task_create(agent="trip", goal="Trip to Rome", input={}))
    assert task.status == TaskStatus.NEEDS_ATTENTION

    task_skip_step(task_id=task.pk, actor=None, reason="no flight")
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    statuses = dict(task.steps.values_list("ordinal", "status"))
    # The hotel does not depend on the flight and runs; the itinerary needs it and is skipped.
    assert statuses == {
        0: StepStatus.SUCCEEDED,
        1: StepStatus.SKIPPED,
        2: StepStatus.SUCCEEDED,
        3: StepStatus.SKIPPED,
    }
    assert Effect.objects.filter(service="hotels", operation="book").count() == 1
    assert Effect.objects.filter(service="email").count() == 0
    skipped = Event.objects.get(task=task, action="agentops.step.skipped", step_ordinal=3)
    assert skipped.payload["reason"] == "depends on skipped step 2"


# -- fan-out, in process ---------------------------------------------------------------------------


def test_fan_out_spawns_pinned_children_and_parks_without_a_lease(sim, redis_clean):
    parent = run_until_parked_or_done(procurement())

    assert parent.status == TaskStatus.AWAITING_CHILDREN
    assert parent.lease_owner == "" and parent.lease_expires_at is None
    children = list(Task.objects.filter(parent=parent).order_by("fanout_index"))
    assert [c.input["supplier"] for c in children] == ["acme", "globex", "initech"]
    assert {c.policy_version_id for c in children} == {parent.policy_version_id}
    assert parent.policy_version_id is not None
    assert all(c.parent_step.ordinal == 0 for c in children)
    assert all(c.status == TaskStatus.QUEUED for c in children)


def test_the_last_child_wakes_the_parent_once_and_it_orders_from_the_cheapest(sim, redis_clean):
    parent = run_family(procurement())

    assert parent.status == TaskStatus.SUCCEEDED, parent.failure
    assert wakes(parent) == 1
    children = list(Task.objects.filter(parent=parent))
    assert {c.status for c in children} == {TaskStatus.SUCCEEDED}
    totals = {c.input["supplier"]: c.steps.get().output["total"] for c in children}
    order = ToolCall.objects.get(task=parent, tool="place_order")
    assert order.args["supplier"] == min(totals, key=totals.get)
    research = parent.steps.get(ordinal=0).output
    assert [c["agent"] for c in research["children"]] == ["supplier_quote"] * 3
    assert completions(parent) == {0: 1, 1: 1, 2: 1}


def test_a_failed_child_stops_only_itself_and_its_retry_resumes_the_parent(sim, redis_clean):
    fault_set(service="suppliers", operation="quote", mode="forbidden", count=1)
    parent = run_family(procurement())

    assert parent.status == TaskStatus.AWAITING_CHILDREN
    children = {c.status: c for c in Task.objects.filter(parent=parent)}
    stopped = children[TaskStatus.NEEDS_ATTENTION]
    assert Counter(c.status for c in Task.objects.filter(parent=parent)) == {
        TaskStatus.SUCCEEDED: 2,
        TaskStatus.NEEDS_ATTENTION: 1,
    }

    task_retry(task_id=stopped.pk, actor=None, reason="scope granted")
    parent = run_family(parent)

    assert parent.status == TaskStatus.SUCCEEDED, parent.failure
    assert wakes(parent) == 1
    for child in Task.objects.filter(parent=parent):
        assert completions(child) == {0: 1}  # completed children never reran
    assert set(quotes_per_key().values()) == {1}
    assert len(quotes_per_key()) == 3


def test_pause_and_resume_propagate_to_children_and_abort_ends_them(sim, redis_clean):
    parent = run_until_parked_or_done(procurement())
    children = Task.objects.filter(parent=parent)

    task_pause(task_id=parent.pk, actor=None, reason="hold")
    assert set(children.values_list("status", flat=True)) == {TaskStatus.PAUSED}
    task_resume(task_id=parent.pk, actor=None)
    assert set(children.values_list("status", flat=True)) == {TaskStatus.QUEUED}
    task_abort(task_id=parent.pk, actor=None, reason="not needed")

    parent.refresh_from_db()
    assert parent.status == TaskStatus.ABORTED
    assert set(children.values_list("status", flat=True)) == {TaskStatus.ABORTED}
    assert wakes(parent) == 0
    propagated = Event.objects.filter(
        task__parent=parent, action="agentops.task.aborted", payload__propagated_from=parent.pk
    )
    assert propagated.count() == 3


def test_rollback_of_a_parent_compensates_its_order_and_reaches_the_children(sim, redis_clean):
    fault_set(service="email", operation="send", mode="forbidden", count=1)
    parent = run_family(procurement())
    assert parent.status == TaskStatus.NEEDS_ATTENTION

    task_rollback(task_id=parent.pk, actor=None, reason="wrong item")
    parent = run_until_parked_or_done(parent)

    assert parent.status == TaskStatus.ROLLED_BACK, parent.failure
    order = ToolCall.objects.get(task=parent, tool="place_order")
    assert order.status == LedgerStatus.COMPENSATED
    assert Effect.objects.filter(service="suppliers", operation="cancel").count() == 1
    # Quotes have no compensation: listed as not undone is only for non-read effects.
    finished = Event.objects.get(task=parent, action="agentops.task.rollback_finished")
    assert finished.payload["not_undone"] == []


def test_sweeper_wakes_a_parent_whose_children_are_all_done(sim, redis_clean):
    from agentops.engine.children import parents_wake_stranded

    parent = run_until_parked_or_done(procurement())
    # Children finished without the wake (as if written by an older release): the DB says so.
    for child in Task.objects.filter(parent=parent):
        status_walk(child, TaskStatus.SUCCEEDED)

    assert parents_wake_stranded() == 1
    assert parents_wake_stranded() == 0
    parent.refresh_from_db()
    assert parent.status == TaskStatus.QUEUED
    assert wakes(parent) == 1


# -- real workers -----------------------------------------------------------------------------


def assert_family_finished_once(parent: Task) -> None:
    parent.refresh_from_db()
    assert parent.status == TaskStatus.SUCCEEDED, parent.failure
    assert completions(parent) == {0: 1, 1: 1, 2: 1}
    assert wakes(parent) == 1
    children = list(Task.objects.filter(parent=parent))
    assert len(children) == 3
    for child in children:
        assert child.status == TaskStatus.SUCCEEDED
        assert completions(child) == {0: 1}
    per_key = Effect.objects.values("idempotency_key").annotate(n=Count("id"))
    assert max(row["n"] for row in per_key) == 1
    assert Effect.objects.filter(service="suppliers", operation="quote").count() == 3
    assert Effect.objects.filter(service="suppliers", operation="order").count() == 1
    assert Effect.objects.filter(service="email", operation="send").count() == 1


@pytest.mark.crash
@pytest.mark.django_db(transaction=True)
def test_children_run_in_parallel_on_real_workers(processes):
    Fault.objects.create(
        service="suppliers", operation="quote", mode=FaultMode.SLOW, delay_seconds=3.0
    )
    parent = procurement()
    processes.worker()
    processes.worker()
    processes.worker()
    processes.sweeper()

    wait_for(lambda: Task.objects.get(pk=parent.pk).is_terminal, timeout=60, message="the parent")

    assert_family_finished_once(parent)
    starts = sorted(
        Event.objects.filter(task__parent=parent, action="agentops.task.claimed").values_list(
            "created_at", flat=True
        )
    )
    ends = sorted(
        Event.objects.filter(task__parent=parent, action="agentops.task.succeeded").values_list(
            "created_at", flat=True
        )
    )
    # Quotes take three seconds each (a margin for workers that start slowly on a busy machine);
    # run one after another, the last would start after the first
    # ended.
    assert starts[-1] < ends[0]


@pytest.mark.crash
@pytest.mark.parametrize(
    ("crash_at", "recoveries"),
    # Killed inside a child's quote (it held the child), or right after the parent parked (it
    # held nothing: the children are queued and the parent waits without a lease).
    # (A child's quote only reads: it commits once, inside its completion, with no pending row.)
    [("inside_step_complete@0", 1), ("after_tool_call@0", 1), ("after_fan_out@0", 0)],
)
@pytest.mark.django_db(transaction=True)
def test_worker_killed_while_children_run_each_child_completes_once(
    processes, crash_at, recoveries
):
    parent = procurement()
    victim = processes.worker(crash_at=crash_at)
    assert victim.wait(timeout=60) == -9
    processes.worker()
    processes.worker()
    processes.sweeper()

    wait_for(lambda: Task.objects.get(pk=parent.pk).is_terminal, timeout=90, message="the parent")

    assert_family_finished_once(parent)
    recovered = Task.objects.filter(pk=parent.pk).values_list("recoveries", flat=True).get()
    recovered += sum(Task.objects.filter(parent=parent).values_list("recoveries", flat=True))
    assert recovered == recoveries


@pytest.mark.crash
@pytest.mark.django_db(transaction=True)
def test_worker_killed_while_the_parent_collects_completes_the_step_once(processes):
    parent = procurement()
    victim = processes.worker(crash_at="fan_out_collected@0")
    assert victim.wait(timeout=60) == -9
    parent.refresh_from_db()
    assert parent.status == TaskStatus.RUNNING  # killed holding the lease, children all done
    processes.worker()
    processes.sweeper()

    wait_for(lambda: Task.objects.get(pk=parent.pk).is_terminal, timeout=60, message="the parent")

    assert_family_finished_once(parent)
    assert Step.objects.get(task=parent, ordinal=0).attempts == 3  # spawn, collect, collect


@pytest.mark.django_db(transaction=True)  # the scenario's own worker reads committed rows
def test_demo_scenario_fanout_one_child_fails_retries_the_child_alone(
    sim_server, redis_clean, monkeypatch
):
    import json
    from io import StringIO

    from django.core.management import call_command

    from tests.conftest import database_url

    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()

    call_command("demo_scenario", "fanout-one-child-fails", "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert report["task_status"] == TaskStatus.SUCCEEDED
    assert [c["status"] for c in report["children"]] == [TaskStatus.SUCCEEDED] * 3
    assert [c["steps_completed"] for c in report["children"]] == [1, 1, 1]
    assert sorted(c["claims"] for c in report["children"]) == [1, 1, 2]  # only one reran
    assert report["effects"] == {"email.send": 1, "suppliers.order": 1, "suppliers.quote": 3}
    assert report["effects_per_key_max"] == 1


# -- rollback reaches the children's effects, newest first -------------------------------------


def _register_booking_family() -> None:
    from agentops.engine.children import ChildSpec, fan_out
    from agentops.engine.registry import Agent, PlanStep, register_agent

    @fan_out("test_two_bookings")
    def two_bookings(task_input, outputs):
        return [
            ChildSpec("test_flight_booker", f"Book {flight}", {"flight_id": flight})
            for flight in ("FL1001", "FL1002")
        ]

    def booker(request):
        flight = request.task_input["flight_id"]
        return {
            "text": "Booking.",
            "tool_calls": [
                {
                    "name": "book_flight",
                    "arguments": {"flight_id": flight, "passenger": "Ada", "amount": 50.0},
                }
            ],
            "confidence": 0.95,
        }

    def notifier(request):
        return {
            "text": "Sending.",
            "tool_calls": [
                {
                    "name": "send_itinerary",
                    "arguments": {"to": "ada@example.com", "subject": "Trips", "body": "Booked."},
                }
            ],
            "confidence": 0.95,
        }

    register_agent(
        Agent(
            name="test_flight_booker",
            system_prompt="Book one flight.",
            tools=["book_flight"],
            plan=[PlanStep("Book the flight", "book_flight")],
            script=booker,
            hidden=True,
        )
    )
    register_agent(
        Agent(
            name="test_bookings",
            system_prompt="Book two flights in parallel, then send the itinerary.",
            tools=["send_itinerary"],
            plan=[
                PlanStep("Book both flights", fan_out="test_two_bookings"),
                PlanStep("Send the itinerary", "send_itinerary", depends_on=(0,)),
            ],
            script=notifier,
            hidden=True,
        )
    )


def test_rollback_of_a_parent_compensates_its_childrens_effects_in_reverse_order(sim, redis_clean):
    _register_booking_family()
    fault_set(service="email", operation="send", mode="forbidden", count=1)
    parent = run_family(task_create(agent="test_bookings", goal="Two flights", input={}))
    assert parent.status == TaskStatus.NEEDS_ATTENTION
    bookings = list(ToolCall.objects.filter(task__parent=parent, tool="book_flight").order_by("id"))
    assert len(bookings) == 2

    task_rollback(task_id=parent.pk, actor=None, reason="trip cancelled")
    parent = run_until_parked_or_done(parent)

    assert parent.status == TaskStatus.ROLLED_BACK, parent.failure
    cancels = list(
        ToolCall.objects.filter(tool="cancel_flight", status=LedgerStatus.SUCCEEDED).order_by("id")
    )
    # Newest effect first: the second booking is cancelled before the first, each once.
    assert [c.compensation_of_id for c in cancels] == [bookings[1].pk, bookings[0].pk]
    assert [c.task_id for c in cancels] == [bookings[1].task_id, bookings[0].task_id]
    assert Effect.objects.filter(service="flights", operation="cancel").count() == 2
    for booking in bookings:
        booking.refresh_from_db()
        assert booking.status == LedgerStatus.COMPENSATED
        noted = Event.objects.filter(
            task_id=booking.task_id,
            action="agentops.ledger.compensated",
            payload__rolled_back_by_parent=parent.pk,
        )
        assert noted.count() == 1
