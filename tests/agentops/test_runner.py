"""The runner in-process against the simulated services: phases, retries, caps, bad input."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import hypothesis
import pytest
from django.utils import timezone
from hypothesis import strategies as st

from agentops.agents.bench import bench_script
from agentops.engine import task_create, task_pause, task_resume
from agentops.engine.errors import FailureKind, NotSerializable, UnknownAgent
from agentops.engine.jsonvalues import is_pointer, loaded
from agentops.engine.model import ModelRequest, loaded_response
from agentops.engine.registry import Agent, PlanStep, register_agent
from agentops.engine.runner import task_advance
from agentops.models import Artifact, Event, Gate, Snapshot, Step, Task, ToolCall
from agentops.plumbing import queues
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.agentops.test_jsonvalues import (
    UNSTORABLE,
    json_objects,
    json_values,
    nested,
    storable,
    with_unstorable_parts,
)
from tests.builders import refund, run_until_parked_or_done
from tests.conftest import silent_stops

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def actions(task: Task) -> list[str]:
    return list(Event.objects.filter(task=task).order_by("seq").values_list("action", flat=True))


def test_a_step_records_every_phase_in_order_with_gapless_seq(sim, redis_clean):
    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    seqs = list(Event.objects.filter(task=task).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))

    def step_actions(ordinal: int) -> list[str]:
        return list(
            Event.objects.filter(task=task, step_ordinal=ordinal)
            .order_by("seq")
            .values_list("action", flat=True)
        )

    # The first step's tool only reads: the call is recorded once, after it ran.
    assert step_actions(0) == [
        "agentops.step.started",
        "agentops.step.model_result",
        "agentops.ledger.succeeded",
        "agentops.step.completed",
    ]
    # The refund is a side effect: its pending row is committed before it runs.
    assert step_actions(3) == [
        "agentops.step.started",
        "agentops.step.model_result",
        "agentops.ledger.pending",
        "agentops.ledger.succeeded",
        "agentops.step.completed",
    ]
    assert Snapshot.objects.filter(task=task).count() == 2  # at creation and at the end
    assert task.current_step == task.step_count == 5
    assert task.tokens_used > 0


def test_a_rate_limited_model_call_parks_for_a_retry_and_then_succeeds(sim, redis_clean):
    task = refund(model_faults={"1": ["429"]})

    task_advance(task_id=task.pk, owner="test")
    task.refresh_from_db()
    assert task.status == TaskStatus.RETRY_SCHEDULED
    assert task.lease_owner == "" and task.next_run_at > timezone.now()
    assert task.failure["kind"] == "rate_limited" and task.failure["layer"] == "model"
    assert task.failure["retry_in_seconds"] >= 1.0  # honours the model's Retry-After

    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    assert Step.objects.get(task=task, ordinal=1).attempts == 2


def test_invalid_model_output_is_retried_until_the_cap_then_stops(sim, redis_clean):
    task = refund(model_faults={"2": ["invalid_json", "timeout", "invalid_json", "timeout"]})

    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.NEEDS_ATTENTION
    step = Step.objects.get(task=task, ordinal=2)
    assert step.attempts == task.step_retry_cap == 3
    assert step.status == StepStatus.FAILED
    assert task.failure["kind"] == "output_invalid"
    assert Event.objects.filter(task=task, action="agentops.step.failed").count() == 3
    assert not ToolCall.objects.filter(task=task, step=step).exists()


def test_a_step_with_a_recorded_response_never_asks_the_model_again(
    sim, redis_clean, tmp_path, monkeypatch
):
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("AGENTOPS_MODEL_CALL_LOG", str(log))
    from agentops.dev.sim.models import Fault, FaultMode

    Fault.objects.create(
        service="logistics", operation="track", mode=FaultMode.ERROR_BEFORE, remaining=1
    )
    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    calls_for_step_2 = [line for line in log.read_text().splitlines() if '"step": 2' in line]
    assert len(calls_for_step_2) == 1
    tries = ToolCall.objects.filter(task=task, step__ordinal=2).order_by("id")
    assert [t.status for t in tries] == [LedgerStatus.FAILED, LedgerStatus.SUCCEEDED]
    assert len({t.idempotency_key for t in tries}) == 1


def test_resume_rebuilds_the_context_with_a_checkpoint_note(sim, redis_clean, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "SLICE_SECONDS": 0.0}
    task = refund()

    task_advance(task_id=task.pk, owner="test")  # one step, then the slice is over
    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED
    assert "agentops.task.yielded" in actions(task)
    assert queues.queue().count >= 1

    task_advance(task_id=task.pk, owner="test")
    started = Event.objects.filter(task=task, action="agentops.step.started", step_ordinal=1).get()
    assert started.payload["attempt"] == 1
    from agentops.engine import context
    from agentops.engine.registry import get_agent

    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    messages = context.build_messages(
        agent=get_agent("refund"),
        task=task,
        steps=steps,
        current=steps[2],
        resumed_at="step 3 of 5",
    )
    assert "resumed from a checkpoint" in messages[1]["content"]
    assert messages[-1]["content"].startswith("Now do step 3 of 5")


def test_pause_revokes_the_lease_and_resume_enqueues_a_job(sim, redis_clean):
    task = refund()
    queue = queues.queue()
    queue.empty()

    task_pause(task_id=task.pk, actor=None, reason="checking with the customer")
    assert task_advance(task_id=task.pk, owner="test") == "not claimable"
    task_resume(task_id=task.pk, actor=None)

    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED
    assert queue.count == 1
    assert run_until_parked_or_done(task).status == TaskStatus.SUCCEEDED


def test_a_duplicated_job_is_a_no_op(sim, redis_clean):
    task = run_until_parked_or_done(refund())
    events = Event.objects.filter(task=task).count()

    assert task_advance(task_id=task.pk, owner="duplicate") == "not claimable"
    assert Event.objects.filter(task=task).count() == events


def test_enqueueing_the_same_task_state_twice_makes_one_job(redis_clean):
    from agentops.engine.dispatch import enqueue_now

    task = refund()
    queue = queues.queue()
    assert queue.count == 1  # enqueued on commit by task_create
    task.refresh_from_db()
    assert enqueue_now(task.pk, token=task.last_seq) is False
    assert queue.count == 1


# The reply the `test_unstorable` agent's script gives (set by each test).
REPLY: dict[str, object] = {}
register_agent(
    Agent(
        name="test_unstorable",
        system_prompt="x",
        tools=["lookup_order"],
        hidden=True,
        plan=[PlanStep("Look")],
        script=lambda r: REPLY["reply"],
    )
)


def assert_stopped_by_the_reply(task: Task, *, paths: list[str], attempts: int) -> None:
    """The task stopped for a person, and its step, with output_invalid naming a path of the
    reply; nothing ran."""
    assert task.status == TaskStatus.NEEDS_ATTENTION
    step = Step.objects.get(task=task)
    assert step.status == StepStatus.FAILED and step.attempts == attempts
    for failure in (task.failure, step.error):
        assert (failure["kind"], failure["layer"]) == ("output_invalid", "model")
        says = failure["message"]
        assert any(f"the model's reply cannot be stored: reply{p}" in says for p in paths), says
    assert step.model_response is None
    assert not ToolCall.objects.filter(task=task).exists()


@pytest.mark.parametrize("kind", ["lone surrogate", "bytes", "set", "NaN", "too deep"])
def test_a_reply_the_engine_cannot_store_is_retried_then_stops_with_its_path(redis_clean, kind):
    REPLY["reply"] = {
        "tool_calls": [
            {"name": "lookup_order", "arguments": {"order_id": "A1", "note": UNSTORABLE[kind]}}
        ]
    }

    task = run_until_parked_or_done(task_create(agent="test_unstorable", goal="look"))

    assert_stopped_by_the_reply(task, paths=[".tool_calls[0].arguments.note"], attempts=3)
    assert Event.objects.filter(task=task, action="agentops.step.failed").count() == 3


replies = st.fixed_dictionaries(
    {
        "text": st.text(storable, max_size=8),
        "tool_calls": st.fixed_dictionaries(
            {"name": st.just("lookup_order"), "arguments": json_objects}
        ).map(lambda call: [call]),
    },
    optional={"confidence": st.floats(0, 1), "extra": json_values},
)


@hypothesis.settings(
    max_examples=25, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(with_unstorable_parts(replies))
def test_any_reply_with_an_unstorable_part_stops_its_step_with_output_invalid_and_the_path(
    redis_clean, case
):
    REPLY["reply"], paths = case

    task = run_until_parked_or_done(
        task_create(agent="test_unstorable", goal="look", step_retry_cap=1)
    )

    assert_stopped_by_the_reply(task, paths=paths, attempts=1)


@pytest.mark.parametrize("amount", [10**400, 10**15], ids=["past-float", "past-the-column"])
def test_an_amount_too_large_for_a_float_or_the_gate_is_routed_not_a_crash(redis_clean, amount):
    """A storable int of 400 digits is a valid `float` argument (pydantic reads it as inf), and
    10^15 does not fit the gate's amount column: the policy sees an amount above its
    threshold, and the task waits at a gate that shows the arguments as given."""
    register_agent(
        Agent(
            name="test_huge_refund",
            system_prompt="x",
            tools=["issue_refund"],
            hidden=True,
            plan=[PlanStep("Refund")],
            script=lambda r: {
                "tool_calls": [
                    {
                        "name": "issue_refund",
                        "arguments": {"order_id": "A1", "amount": amount, "currency": "EUR"},
                    }
                ]
            },
        )
    )

    task = run_until_parked_or_done(task_create(agent="test_huge_refund", goal="refund"))

    assert task.status == TaskStatus.AWAITING_APPROVAL, task.failure
    gate = Gate.objects.get(task=task)
    assert gate.amount is None and gate.arguments["amount"] == amount
    assert not ToolCall.objects.filter(task=task).exists()


def test_a_stop_without_a_recorded_reason_is_what_the_suite_fails_a_test_for(redis_clean):
    """A step that reached its cap with no failure of its own (its last try did not finish) is
    a process crash; the check every test that uses the database ends with
    (`every_stop_says_why`) fails a test that killed no worker for it."""
    task = task_create(agent="test_unstorable", goal="look", step_retry_cap=1)
    Step.objects.filter(task=task).update(attempts=1)

    task_advance(task_id=task.pk, owner="test")

    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.PROCESS_CRASH
    assert task.failure["message"] == (
        "step 1 was attempted 1 times (cap 1); its last try did not finish: its worker stopped "
        "mid-step (killed, out of memory, or an error in the worker's log)"
    )
    assert task.failure["detail"] == {
        "step": 0,
        "last_failure": None,
        "attempt_cap": 1,
        "unfinished": True,
    }
    assert silent_stops() == [(task.pk, task.failure)]
    assert silent_stops(workers_killed=True) == []
    # Said why after all, so that this test's own teardown check passes.
    Task.objects.filter(pk=task.pk).update(failure={**task.failure, "detail": {}})
    assert silent_stops() == []


def test_input_nested_too_deeply_is_refused_with_its_path(redis_clean):
    with pytest.raises(NotSerializable, match=r"^input\.a(\[0\]){199}: nested deeper than 200"):
        task_create(agent="refund", goal="x", input={"a": nested(100_000)})
    assert not Task.objects.exists()


def test_non_json_input_is_rejected_with_its_path(redis_clean):
    class DataFrame:
        pass

    with pytest.raises(NotSerializable, match=r"input\.rows\[1\]: DataFrame is not JSON"):
        task_create(agent="refund", goal="x", input={"rows": [1, DataFrame()]})
    assert not Task.objects.exists()


def test_an_unknown_agent_is_a_clear_error(redis_clean):
    with pytest.raises(UnknownAgent, match=r"unknown agent 'nope'; registered agents: .*refund"):
        task_create(agent="nope", goal="x")


@pytest.fixture
def large_payload_task(redis_clean, settings, tmp_path):  # type: ignore[no-untyped-def]
    """A 2-step bench task with 300 KB arguments and results, run to its end (artifacts under
    tmp_path)."""
    settings.MEDIA_ROOT = tmp_path
    task = task_create(agent="bench_noop", goal="big", input={"steps": 2, "payload_kb": 300})
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    return task


def test_an_oversized_payload_goes_to_artifact_storage(large_payload_task, tmp_path):
    task = large_payload_task
    step = Step.objects.get(task=task, ordinal=0)
    assert set(step.output) == {"$artifact", "size", "sha256", "path"}
    assert step.output["size"] > 300 * 1024
    artifact = Artifact.objects.get(pk=step.output["$artifact"])
    assert (tmp_path / artifact.name).stat().st_size == artifact.size


def test_a_large_proposal_is_stored_once_and_read_back_exactly(large_payload_task):
    task = large_payload_task
    step = Step.objects.get(task=task, ordinal=1)
    call = ToolCall.objects.get(step=step)
    # The step's record stays in the row; its call's arguments point at the ledger row's
    # artifact, which holds exactly what the model proposed.
    assert not is_pointer(step.model_response)
    assert step.model_response["tool_calls"][0]["arguments"] == call.args
    assert is_pointer(call.args)
    request = ModelRequest(
        agent="bench_noop",
        task_id=task.pk,
        step=1,
        step_title="",
        attempt=1,
        messages=[],
        tools=[],
        task_input=task.input,
    )
    proposed = bench_script(request)["tool_calls"][0]["arguments"]
    assert loaded_response(step.model_response)["tool_calls"][0]["arguments"] == proposed
    assert loaded(call.args) == proposed
    assert loaded(step.output) == {"n": 1, "payload": proposed["payload"]}
    # Arguments and output are the same JSON here: one file, named by its content.
    names = set(Artifact.objects.filter(task=task).values_list("name", flat=True))
    assert len(names) == 2


def _planner(request: ModelRequest) -> dict:
    if request.planning:
        return {"plan": [{"title": "Look up", "tool": "lookup_order"}, {"title": "Summarize"}]}
    if request.step == 0:
        return {
            "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A1001"}}],
            "confidence": 0.9,
        }
    return {"text": "Order A1001 is delivered.", "confidence": 0.9}


register_agent(
    Agent(
        name="test_planner",
        system_prompt="Plan, then act.",
        tools=["lookup_order"],
        plan=None,
        script=_planner,
        hidden=True,
    )
)


def test_an_agent_without_a_fixed_plan_gets_its_plan_from_the_model(sim, redis_clean):
    task = task_create(agent="test_planner", goal="Check order A1001")
    assert task.step_count == 0

    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    assert list(task.steps.values_list("title", flat=True)) == ["Look up", "Summarize"]
    assert Step.objects.get(task=task, ordinal=1).output == {"text": "Order A1001 is delivered."}


def test_a_proposed_tool_the_agent_does_not_have_is_invalid_output(sim, redis_clean):
    register_agent(
        Agent(
            name="test_rogue",
            system_prompt="x",
            tools=["lookup_order"],
            hidden=True,
            plan=[PlanStep("Refund")],
            script=lambda r: {"tool_calls": [{"name": "issue_refund", "arguments": {}}]},
        )
    )
    task = run_until_parked_or_done(task_create(agent="test_rogue", goal="rogue"))

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "output_invalid"
    assert "does not have" in task.failure["message"]
    assert not ToolCall.objects.filter(task=task).exists()


def test_a_token_budget_stops_the_task(sim, redis_clean):
    task = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund", input={"order_id": "A1001"}, token_budget=1)
    )

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "budget_overflow"
    assert Step.objects.filter(task=task, status=StepStatus.SUCCEEDED).count() == 1


def test_retry_backoff_grows_and_honours_retry_after(settings):
    from agentops.engine.retries import backoff_seconds

    settings.AGENTOPS = {**settings.AGENTOPS, "BACKOFF_BASE_SECONDS": 1.0}
    assert 1.0 <= backoff_seconds(1, None) <= 1.25
    assert 4.0 <= backoff_seconds(3, None) <= 5.0
    assert backoff_seconds(1, 30.0) == 30.0
    assert timedelta(seconds=backoff_seconds(20, None)) <= timedelta(seconds=75)


def test_the_same_action_proposed_again_and_again_stops_as_a_planning_loop(sim, redis_clean):
    register_agent(
        Agent(
            name="test_looper",
            system_prompt="x",
            tools=["lookup_order"],
            hidden=True,
            plan=[PlanStep(f"Look {i}") for i in range(5)],
            script=lambda r: {
                "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A1001"}}]
            },
        )
    )
    task = run_until_parked_or_done(task_create(agent="test_looper", goal="loop"))

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "planning_loop"
    assert Step.objects.filter(task=task, status=StepStatus.SUCCEEDED).count() == 2
    assert ToolCall.objects.filter(task=task).count() == 2


def test_an_error_that_escapes_a_step_is_recorded_on_it_and_quoted_by_the_stop_at_its_cap(
    redis_clean, monkeypatch
):
    """An error the engine does not classify (a bug) still propagates to the worker's log, and
    is recorded, redacted, on the step it interrupted: the step stays as a crash leaves it, and
    the stop at its cap says what its last try raised instead of "did not finish"."""
    from agentops.engine import proposals

    def bug(run, step):
        raise RuntimeError("boom, password=hunter22")

    monkeypatch.setattr(proposals, "ask_model", bug)
    task = task_create(agent="refund", goal="Refund A1001", input={"order_id": "A1001"})
    Task.objects.filter(pk=task.pk).update(step_retry_cap=2)
    said = "its try raised RuntimeError: boom, password=[redacted]"

    for attempt in (1, 2):
        with pytest.raises(RuntimeError, match="hunter22"):
            task_advance(task_id=task.pk, owner=f"worker-{attempt}")
        step = Step.objects.get(task=task, ordinal=0)
        assert (step.status, step.attempts) == (StepStatus.RUNNING, attempt)
        assert step.error["kind"] == FailureKind.PROCESS_CRASH
        assert step.error["message"] == said
        assert step.error["detail"] == {"escaped": "RuntimeError"}
        # Its worker's lease runs out, as after a crash; the sweeper would re-drive it.
        Task.objects.filter(pk=task.pk).update(
            lease_expires_at=timezone.now() - timedelta(minutes=1)
        )

    task_advance(task_id=task.pk, owner="worker-3")

    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.PROCESS_CRASH
    assert task.failure["message"] == f"step 1 was attempted 2 times (cap 2); last failure: {said}"
    assert "hunter22" not in str(Step.objects.get(task=task, ordinal=0).error)
    assert silent_stops() == []
