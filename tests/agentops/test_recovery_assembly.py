"""The rules of a stopped task, in the engine (`agentops/engine/recovery.py`), on rows built in
memory: which step is stuck, how the ledger reads to the advisor, what stopping would do, and
why an intervention is refused. The selectors and the gate panel only load rows for these."""

from __future__ import annotations

from agentops.engine import Recommendation, Recovery, stop_previews
from agentops.engine.advisor import Action
from agentops.engine.recovery import STUCK, ledger_views, stuck_step
from agentops.models import Step, ToolCall
from agentops.states import LedgerStatus, StepStatus


def steps(*statuses: StepStatus) -> list[Step]:
    return [
        Step(pk=n + 1, ordinal=n, title=f"step {n + 1}", status=status)
        for n, status in enumerate(statuses)
    ]


def test_the_stuck_step_is_the_first_failed_or_left_running() -> None:
    done, failed, running = StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.RUNNING

    assert {StepStatus.FAILED, StepStatus.RUNNING} == STUCK
    assert stuck_step(steps(done, running, failed)).ordinal == 1  # type: ignore[union-attr]
    assert stuck_step(steps(done, failed, running)).ordinal == 1  # type: ignore[union-attr]
    assert stuck_step(steps(done, StepStatus.PENDING)) is None


def test_the_ledger_reads_an_unregistered_tool_by_its_recorded_side_effect() -> None:
    call = ToolCall(
        pk=9,
        tool="no_such_tool_anymore",
        status=LedgerStatus.SUCCEEDED,
        side_effect="write",
        idempotency_key="k9",
    )

    [view] = ledger_views([call])

    assert (view.key, view.tool, view.status, view.side_effect) == (
        "k9",
        "no_such_tool_anymore",
        LedgerStatus.SUCCEEDED,
        "write",
    )
    assert not view.compensable and view.compensates is None


def test_stopping_previews_abort_and_rollback_from_the_same_views() -> None:
    call = ToolCall(
        pk=3, tool="gone", status=LedgerStatus.SUCCEEDED, side_effect="write", idempotency_key="k"
    )

    previews = stop_previews([call], steps(StepStatus.SUCCEEDED, StepStatus.PENDING))

    assert list(previews) == ["abort", "rollback"]
    assert previews["rollback"].not_undoable[0].tool == "gone"


def test_an_intervention_not_offered_is_refused_with_the_options() -> None:
    recovery = Recovery(
        recommendation=Recommendation(
            action=Action.RETRY, options=(Action.RETRY, Action.ABORT), rule="r", rationale="why"
        ),
        previews={},
        stuck_step=None,
        breakpoint="",
    )

    assert recovery.refusal("retry") is None
    assert recovery.refusal("skip") == (
        "skip is not an option for this task now; choose one of retry, abort"
    )
