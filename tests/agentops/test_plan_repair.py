"""Plan repair on a stopped task (engine/planedit.py, engine/repair.py): change a remaining
step's instruction, insert a step, remove a step not yet started, switch to another declared
strategy; within the dependency rules, with a preview; the runner follows the repaired plan and
completed steps and their effects are untouched (counted on the simulated services).
In-process here; the demo scenario `plan-repair` runs it with real workers.
"""

from __future__ import annotations

import pytest

from agentops.dev.sim.models import Effect
from agentops.engine import task_create, task_retry
from agentops.engine.checkpoints import checkpoint_verify
from agentops.engine.errors import FailureKind, TransitionRefused
from agentops.engine.planedit import PlanEdit, RepairRefused
from agentops.engine.repair import plan_repair_preview_load, task_plan_repair
from agentops.models import Event, Step, Task, ToolCall
from agentops.selectors import task_get_recovery
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.builders import run_until_parked_or_done

pytestmark = pytest.mark.django_db


def sold_out_trip(**input_overrides) -> Task:
    task = task_create(
        agent="trip",
        goal="Trip to Rome",
        input={"traveller": "Ada", "hotel_id": "H0404", **input_overrides},
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.CONFLICT
    return task


def effects() -> dict[str, int]:
    counts: dict[str, int] = {}
    for service, operation in Effect.objects.values_list("service", "operation"):
        counts[f"{service}.{operation}"] = counts.get(f"{service}.{operation}", 0) + 1
    return counts


def plan(task: Task) -> list[tuple[str, str, str | None, str]]:
    return [
        (s.title, s.status, s.spec.get("tool"), s.spec.get("instruction", ""))
        for s in Step.objects.filter(task=task).order_by("ordinal")
    ]


def starts(task: Task, ordinal: int) -> int:
    return Event.objects.filter(
        task=task, step_ordinal=ordinal, action="agentops.step.started"
    ).count()


def test_a_logic_failure_recommends_repairing_the_plan(sim, redis_clean):
    task = sold_out_trip()

    recommendation = task_get_recovery(task_id=task.pk)
    assert recommendation.action == "repair"
    assert recommendation.rule == "plan-repair"
    assert recommendation.options[:2] == ("repair", "retry")


def test_a_new_instruction_for_the_stuck_step_is_followed_and_nothing_done_runs_again(
    sim, redis_clean
):
    task = sold_out_trip()
    before = effects()
    flight_call = ToolCall.objects.get(task=task, tool="book_flight")

    preview = plan_repair_preview_load(
        task_id=task.pk,
        edit=PlanEdit("instruct", ordinal=2, instruction="It is full: book hotel H7000."),
    )
    assert [r["step"] for r in preview.runs] == [3, 4]
    assert preview.changes == [
        {
            "op": "instruct",
            "step": 3,
            "title": "Book the hotel",
            "before": "",
            "after": "It is full: book hotel H7000.",
        }
    ]
    assert (
        Step.objects.get(task=task, ordinal=2).model_response is not None
    )  # preview writes nothing

    _, applied = task_plan_repair(
        task_id=task.pk,
        edit=PlanEdit("instruct", ordinal=2, instruction="It is full: book hotel H7000."),
        actor=None,
        reason="sold out",
        then_retry=True,
        seen_digest=preview.before_digest,
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert applied.after_digest != applied.before_digest
    hotel = ToolCall.objects.get(task=task, tool="book_hotel", status=LedgerStatus.SUCCEEDED)
    assert hotel.args["hotel_id"] == "H7000"
    after = effects()
    assert after["flights.book"] == before["flights.book"] == 1
    assert after["hotels.book"] == 1 and after["email.send"] == 1
    assert [starts(task, o) for o in range(4)] == [1, 1, 2, 1]
    flight_call.refresh_from_db()
    assert flight_call.status == LedgerStatus.SUCCEEDED  # untouched
    event = Event.objects.get(task=task, action="agentops.task.plan_repaired")
    assert event.payload["changes"][0]["after"] == "It is full: book hotel H7000."
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    calls = list(ToolCall.objects.filter(task=task).order_by("id"))
    checkpoint_verify(task, steps, calls)


def test_an_inserted_step_runs_in_its_place_and_later_steps_move_down(sim, redis_clean):
    task = sold_out_trip()
    task_plan_repair(
        task_id=task.pk,
        edit=PlanEdit("instruct", ordinal=2, instruction="book hotel H7000"),
        actor=None,
        reason="sold out",
    )

    _, preview = task_plan_repair(
        task_id=task.pk,
        edit=PlanEdit(
            "insert",
            ordinal=3,
            title="Copy the itinerary to the office",
            tool="send_itinerary",
            instruction="Send a copy to office@example.com",
            depends_on=(1,),
        ),
        actor=None,
        reason="the office wants a copy",
        then_retry=True,
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert task.step_count == 5
    assert [p[0] for p in plan(task)] == [
        "Search flights",
        "Book the flight",
        "Book the hotel",
        "Copy the itinerary to the office",
        "Send the itinerary",
    ]
    assert Step.objects.get(task=task, ordinal=4).depends_on == [1]  # was (1,), unmoved
    assert {"op": "move", "from": 4, "step": 5, "title": "Send the itinerary"} in preview.changes
    to = list(
        ToolCall.objects.filter(task=task, tool="send_itinerary")
        .order_by("id")
        .values_list("args__to", flat=True)
    )
    assert to == ["office@example.com", "ada@example.com"]
    assert effects()["flights.book"] == 1


def test_a_removed_step_is_kept_as_skipped_and_its_dependants_inherit_its_dependencies(
    sim, redis_clean
):
    task = sold_out_trip()
    _, preview = task_plan_repair(
        task_id=task.pk, edit=PlanEdit("remove", ordinal=3), actor=None, reason="no email"
    )

    removed = Step.objects.get(task=task, ordinal=3)
    assert removed.status == StepStatus.SKIPPED
    assert removed.spec["removed"]["why"] == "removed by plan repair"
    assert removed.spec["removed"]["reason"] == "no email"
    assert preview.runs == [preview.after[2].view()]  # only the stuck step is left to run
    assert task_get_recovery(task_id=task.pk) is not None  # still stopped: no retry asked


def test_removal_rewires_the_dependants(sim, redis_clean):
    task = sold_out_trip()
    task_plan_repair(
        task_id=task.pk,
        edit=PlanEdit("insert", ordinal=3, title="Check the visa", depends_on=(1,)),
        actor=None,
        reason="visa",
    )
    task_plan_repair(
        task_id=task.pk,
        edit=PlanEdit("insert", ordinal=4, title="Tell the traveller", depends_on=(3,)),
        actor=None,
        reason="tell",
    )

    _, preview = task_plan_repair(
        task_id=task.pk, edit=PlanEdit("remove", ordinal=3), actor=None, reason="no visa needed"
    )

    assert Step.objects.get(task=task, ordinal=4).depends_on == [1]
    assert {"op": "depends", "step": 5, "title": "Tell the traveller", "after": "2"} in (
        preview.changes
    )


def test_switching_strategy_replaces_the_stuck_step_and_the_open_tail(sim, redis_clean):
    task = sold_out_trip()
    flights_before = effects()["flights.book"]

    _, preview = task_plan_repair(
        task_id=task.pk,
        edit=PlanEdit("strategy", strategy="flight_only"),
        actor=None,
        reason="Ada books the hotel herself",
        then_retry=True,
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert plan(task) == [
        ("Search flights", StepStatus.SUCCEEDED, "search_flights", ""),
        ("Book the flight", StepStatus.SUCCEEDED, "book_flight", ""),
        ("Book the hotel", StepStatus.SKIPPED, "book_hotel", ""),
        (
            "Send the itinerary",
            StepStatus.SUCCEEDED,
            "send_itinerary",
            "Say that the traveller books the hotel themselves.",
        ),
    ]
    assert Step.objects.get(task=task, ordinal=2).spec["removed"]["why"] == (
        "replaced by strategy flight_only"
    )
    assert preview.changes[0] == {"op": "strategy", "before": "default", "after": "flight_only"}
    assert effects()["flights.book"] == flights_before == 1
    assert "hotels.book" not in effects()
    body = ToolCall.objects.get(task=task, tool="send_itinerary").args["body"]
    assert "the hotel is not part of this trip" in body


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (PlanEdit("instruct", ordinal=1, instruction="again"), "has run"),
        (PlanEdit("remove", ordinal=1), "only a step that has not started"),
        (PlanEdit("remove", ordinal=2), "only a step that has not started"),
        (PlanEdit("insert", ordinal=1, title="Early"), "a new step can go only after"),
        (PlanEdit("insert", ordinal=3, title="Late", depends_on=(3,)), "earlier steps"),
        (PlanEdit("insert", ordinal=3, title="T", tool="issue_refund"), "is not one of"),
        (PlanEdit("insert", ordinal=3, title="   "), "say what the step is to do"),
        (PlanEdit("instruct", ordinal=9, instruction="x"), "there is no step 10"),
        (PlanEdit("strategy", strategy="by_train"), "is not one agent trip declares"),
        (PlanEdit("instruct", ordinal=3, instruction="x" * 2001), "at most 2000"),
        (PlanEdit("rewrite", ordinal=3), "unknown change"),
    ],
)
def test_a_repair_that_breaks_a_rule_is_refused_with_the_rule_and_writes_nothing(
    sim, redis_clean, edit, message
):
    task = sold_out_trip()
    seq = task.last_seq

    with pytest.raises(RepairRefused, match=message):
        task_plan_repair(task_id=task.pk, edit=edit, actor=None, reason="x")

    task.refresh_from_db()
    assert task.last_seq == seq and task.status == TaskStatus.NEEDS_ATTENTION


def test_a_stale_preview_and_a_task_no_longer_stopped_are_refused(sim, redis_clean):
    task = sold_out_trip()
    edit = PlanEdit("instruct", ordinal=3, instruction="Mention the museum pass.")
    seen = plan_repair_preview_load(task_id=task.pk, edit=edit).before_digest
    task_plan_repair(task_id=task.pk, edit=edit, actor=None, reason="first", seen_digest=seen)

    with pytest.raises(TransitionRefused, match="changed since you saw it"):
        task_plan_repair(
            task_id=task.pk,
            edit=PlanEdit("instruct", ordinal=3, instruction="Other."),
            actor=None,
            reason="second",
            seen_digest=seen,
        )
    task_retry(task_id=task.pk, actor=None)
    with pytest.raises(TransitionRefused, match="its plan is not repaired"):
        task_plan_repair(task_id=task.pk, edit=edit, actor=None, reason="late")


def test_typed_instructions_are_redacted_before_they_are_stored(sim, redis_clean):
    task = sold_out_trip()

    task_plan_repair(
        task_id=task.pk,
        edit=PlanEdit("instruct", ordinal=3, instruction="use token=sk-live-abcdefghijklmnop1234"),
        actor=None,
        reason="x",
    )

    stored = Step.objects.get(task=task, ordinal=3).spec["instruction"]
    assert "abcdefghijklmnop1234" not in stored


def test_repair_is_advised_only_when_it_can_change_the_stuck_step():
    from django.utils import timezone

    from agentops.engine.planedit import repair_fixes_the_stop, repair_targets

    now = timezone.now()
    steps = [
        Step(
            pk=1, ordinal=0, title="Done", status=StepStatus.SUCCEEDED, started_at=now, attempts=1
        ),
        Step(pk=2, ordinal=1, title="Stuck", status=StepStatus.FAILED, started_at=now, attempts=1),
        Step(pk=3, ordinal=2, title="Next", status=StepStatus.PENDING),
    ]

    assert repair_fixes_the_stop(steps, live_call_steps=set())
    # The stuck step's call is live (its proposal is fixed): new steps after it fix nothing.
    assert not repair_fixes_the_stop(steps, live_call_steps={2})
    targets = repair_targets(steps, None, {2})
    assert (targets.instructable, targets.removable, targets.insert_at) == ((2,), (2,), (2, 3))
