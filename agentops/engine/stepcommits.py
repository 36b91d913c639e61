"""The runner's commits: each phase's writes assembled into one fenced commit.

A step's start (its prompt built, its row moved along `start`), its completion with what comes
next (the next step's start, a yield or the task's success, a snapshot when due) and a failure
(park for a retry or stop for a person): functions over the run's state (`runstate.RunState`),
called by the runner's step loop (`runner.TaskRun`).
"""

from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from agentops.engine import context as ctxbuild
from agentops.engine import gates, retries, routing
from agentops.engine.checkpoints import snapshot_state, snapshot_write
from agentops.engine.crashpoints import crashpoint
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import FailureKind, StepFailure
from agentops.engine.jsonvalues import offloaded
from agentops.engine.registry import Tool
from agentops.engine.runstate import Routed, RunState, StepResult
from agentops.engine.transitions import (
    Commit,
    EventSpec,
    call_as,
    db_time_after,
    fenced_commit,
    fenced_write,
    ledger_transition,
    step_as_done,
    step_as_started,
    step_transition,
    task_as,
)
from agentops.models import Step, ToolCall
from agentops.states import STEP_DONE, STEP_TRANSITIONS, LedgerStatus, Phase, StepStatus
from policies.engine import Route

# -- phase 1: before_model_call -----------------------------------------------------------


def begin_events(
    run: RunState, step: Step, steps: list[Step] | None = None
) -> tuple[list[EventSpec], dict[str, Any]]:
    """Events and task fields that start `step`. Builds the step's prompt as a side effect,
    from `steps` (default: the run's view of the steps)."""
    overflowed = (step.error or {}).get("kind") == FailureKind.CONTEXT_OVERFLOW
    view = run.steps if steps is None else steps
    built = ctxbuild.build_context(
        agent=run.agent,
        task=run.task,
        steps=view,
        scale=ctxbuild.calibration(view, before=step, known=run.prompts.artifacts),
        current=step,
        resumed_at=run.resumed_at,
        notes=_notes(run, step),
        # After a context overflow, summarize more of the earlier work, in half the budget.
        recent=1 if overflowed else None,
        budget=ctxbuild.budget_for(run.agent) // 2 if overflowed else None,
        cache=run.prompts,
    )
    run.messages = built.messages
    run.prompt_estimate = built.estimate
    run.reads_offered = built.reads
    run.summarized = built.summarized
    attempt = step.attempts + 1
    payload: dict[str, Any] = {
        "attempt": attempt,
        "prompt_digest": built.digest,
        "phase": Phase.BEFORE_MODEL_CALL,
        "model_response_recorded": step.model_response is not None,
        "context": {
            "tokens_estimate": built.tokens,
            "budget": built.budget,
            "summarized_steps": built.summarized,
            "over_budget": built.over_budget,
            "scale": built.scale,
        },
    }
    if built.results:
        # What the prompt gave of each result stored as an artifact or cut short: the value
        # in full, or an excerpt of `bytes` of `of` (docs/architecture.md, "What the model reads").
        payload["context"]["results"] = list(built.results)
    fields: dict[str, Any] = {"current_step": step.ordinal, "phase": Phase.BEFORE_MODEL_CALL}
    if run.tokens_saved:
        payload["tokens_saved_by_resume"] = run.tokens_saved
        fields["tokens_saved"] = F("tokens_saved") + run.tokens_saved
        run.tokens_saved = 0
    event = EventSpec(
        STEP_TRANSITIONS["start"].event,
        step=step.ordinal,
        payload=payload,
        fold={"steps": {str(step.ordinal): StepStatus.RUNNING}, "current_step": step.ordinal},
    )
    return [event], fields


def begin_rows(run: RunState, commit: Commit, step: Step, events: list[EventSpec]) -> None:
    """Start the step's row in `commit`; a step that cannot start refuses the commit
    (CheckpointMismatch)."""
    commit.step(
        step,
        "start",
        required=True,
        attempts=step.attempts + 1,
        prompt_digest=events[0].payload["prompt_digest"],
        agent_version=run.version.digest,
        model_name=run.model_name,
        started_at=Now(),
        error=None,
    )


def _notes(run: RunState, step: Step) -> list[str]:
    """Reviewers' notes on the step, plus a repair note when its last reply was invalid."""
    notes = [n for n in (step.spec.get("notes") or []) if isinstance(n, str)]
    last = step.error or {}
    if last.get("kind") == FailureKind.OUTPUT_INVALID:
        notes.append(
            f"Your previous reply for this step was rejected: {last.get('message', '')}. "
            "Answer with one JSON object and at most one tool call whose arguments fit "
            "the tool's parameters."
        )
    return notes


# -- phases 4-5: after_tool_call, step_complete --------------------------------------------


def complete(
    run: RunState,
    step: Step,
    result: StepResult,
    *,
    begin: Step | None = None,
    then: Literal["succeed", "yield"] | None = None,
) -> None:
    """Commit the tool outcome and the step's completion with what comes next: the next
    step's start (`begin`), or the task's transition `then` (a yield at the end of the slice,
    or its success), or nothing (the loop goes on in this slice). A step that committed
    nothing before (a read-only call, a text reply) records here its model result, routing
    and call too: its one commit."""
    crashpoint("after_tool_call", step=step.ordinal)
    call, outcome = result.call, result.outcome
    unrecorded = result.unrecorded_call
    record_outcome = (
        unrecorded is None
        and call is not None
        and outcome is not None
        and call.status != LedgerStatus.SUCCEEDED
    )
    events, fields = _unrecorded_events(run, step, result)
    if record_outcome:
        assert call is not None and outcome is not None
        events.append(
            EventSpec(
                "agentops.ledger.succeeded",
                step=step.ordinal,
                payload={
                    "key": call.idempotency_key,
                    "how": outcome.how,
                    "phase": Phase.AFTER_TOOL_CALL,
                },
                fold={"ledger": {call.idempotency_key: LedgerStatus.SUCCEEDED}},
            )
        )
    progress = (
        begin.ordinal if begin else (run.task.step_count if then == "succeed" else step.ordinal + 1)
    )
    events.append(
        EventSpec(
            STEP_TRANSITIONS["succeed"].event,
            step=step.ordinal,
            payload={"phase": Phase.STEP_COMPLETE},
            fold={"steps": {str(step.ordinal): StepStatus.SUCCEEDED}, "current_step": progress},
        )
    )
    fields.update({"current_step": progress, "phase": Phase.STEP_COMPLETE})
    transition = then
    # The artifacts this commit stores are read by the next step's prompt from memory.
    run.prompts.artifacts.clear()
    with fenced_commit(run.lease, events, transition=transition, **fields) as commit:
        known = outcome.known if outcome is not None and result.output is outcome.result else None
        output = commit.offloaded(
            result.output,
            path="step.output",
            task_id=run.task.pk,
            known=known,
            # Its JSON is known only for a result the tool just returned, which
            # `ledger.checked_result` validated (and redaction left equal).
            checked=known is not None,
        )
        run.prompts.remember(output, result.output)
        # Before the next step's prompt is built: it reads this step's model response.
        step_fields, args = _unrecorded_step_fields(run, commit, step, result)
        done = step_as_done(step, output=output)
        view = [done if s.id == step.id else s for s in run.steps]
        next_events: list[EventSpec] = []
        if begin is not None:
            # Same commit, no external call in between: the next step starts here, with a
            # prompt built from this step as it reads once committed.
            next_events, next_fields = begin_events(run, begin, steps=view)
            commit.events.extend(next_events)
            commit.fields.update(next_fields)
        recorded = None
        if unrecorded is not None:
            recorded = _record_read_call(run, commit, unrecorded, args, output, result)
        if record_outcome:
            assert call is not None and outcome is not None
            # The step's output is the tool's result: one stored copy (one artifact) serves
            # both rows.
            stored = (
                output
                if result.output is outcome.result
                else commit.offloaded(outcome.result, path="tool_call.result", task_id=run.task.pk)
            )
            commit.ledger(call, LedgerStatus.SUCCEEDED, result=stored)
        commit.step(step, "succeed", finished_at=Now(), output=output, **step_fields)
        if begin is not None:
            begin_rows(run, commit, begin, next_events)
        if transition == "succeed" or _snapshot_due(run, view):
            commit.snapshot(
                _snapshot_state(
                    run,
                    status=commit.fields.get("status", run.task.status),
                    current_step=progress,
                    steps=view,
                    started=begin,
                    succeeded_call=call if record_outcome else None,
                    recorded_call=recorded,
                )
            )
        # Nothing is sent before the block ends: a worker killed here commits nothing.
        crashpoint("inside_step_complete", step=step.ordinal)
        if unrecorded is not None and recorded is not None:
            _audit_read_call(run, commit, unrecorded, recorded)
    if recorded is not None:
        run.calls[recorded.pk] = recorded
    if transition == "yield":
        task_enqueue(run.task.pk, token=commit.seq)


def _unrecorded_events(
    run: RunState, step: Step, result: StepResult
) -> tuple[list[EventSpec], dict[str, Any]]:
    """The events and task fields of what the step did not commit before its completion:
    the model result (and its usage), and a read-only call's routing and outcome (one
    `ledger.succeeded` event: the row is never pending)."""
    events: list[EventSpec] = []
    fields: dict[str, Any] = {}
    if result.unrecorded_reply is not None:
        event, usage_fields, _ = result.unrecorded_reply
        events.append(event)
        fields.update(usage_fields)
    routed, outcome = result.unrecorded_call, result.outcome
    if routed is not None:
        assert outcome is not None
        events.extend(routed.events)
        fields.update({k: v for k, v in routed.fields.items() if k != "phase"})
        payload = routing.routed_payload(
            tool=routed.tool, verdict=routed.verdict, digest=routed.digest
        )
        events.append(
            EventSpec(
                "agentops.ledger.succeeded",
                step=step.ordinal,
                payload={
                    **payload,
                    "key": routed.key,
                    "how": outcome.how,
                    "phase": Phase.AFTER_TOOL_CALL,
                    "recorded": "once, after the read",
                },
                fold={"ledger": {routed.key: LedgerStatus.SUCCEEDED}},
            )
        )
    return events, fields


def _unrecorded_step_fields(
    run: RunState, commit: Commit, step: Step, result: StepResult
) -> tuple[dict[str, Any], Any]:
    """The step's columns the completion writes besides its own: the model response not
    recorded yet (set on `step` now) and a read-only call's routing; and that call's
    arguments as stored (the record points at their artifact when they are the proposal)."""
    fields: dict[str, Any] = {}
    record, args = None, None
    if result.unrecorded_reply is not None:
        record = result.unrecorded_reply[2]
    routed = result.unrecorded_call
    if routed is not None:
        fields.update(routed.step_routing())
        args, record = routed.arguments_stored(commit, task_id=run.task.pk)
        run.prompts.remember(args, routed.arguments)
    if record is not None:
        fields["model_response"] = commit.offloaded(
            record, path="step.model_response", task_id=run.task.pk
        )
        run.prompts.remember(fields["model_response"], record)
        step.model_response = fields["model_response"]
    return fields, args


def _record_read_call(
    run: RunState, commit: Commit, routed: Routed, args: Any, output: Any, result: StepResult
) -> ToolCall:
    """Insert the read-only call's ledger row, `succeeded` with its result, in `commit`."""
    outcome = result.outcome
    assert outcome is not None and routed.call is not None
    stored = (
        output
        if result.output is outcome.result
        else commit.offloaded(outcome.result, path="tool_call.result", task_id=run.task.pk)
    )
    # The row `_defer_call` made (task, step, tool, digest, key), as it is stored.
    call = routed.call
    call.args, call.status, call.result = args, LedgerStatus.SUCCEEDED, stored
    return commit.call_insert(call)


def _audit_read_call(run: RunState, commit: Commit, routed: Routed, call: ToolCall) -> None:
    """The audit item of an audited read-only call names its row: the same statement
    inserts it."""
    if routing.audited(routed.verdict, routed.step):
        item = gates.audit_item_of(
            task=run.task,
            step=routed.step,
            call=call,
            verdict=routed.verdict,
            sampled=routed.verdict.route != Route.AUDIT,
        )
        commit.audit_insert(item, call)


def finish(run: RunState) -> None:
    """Every step is done (e.g. the last one was skipped by a person): the task succeeds."""
    event = EventSpec("agentops.task.completed", fold={"current_step": run.task.step_count})
    with transaction.atomic():
        seq = fenced_write(
            run.lease,
            [event],
            transition="succeed",
            current_step=run.task.step_count,
            phase=Phase.STEP_COMPLETE,
        )
        snapshot_write(task_id=run.task.pk, seq=seq)


def _snapshot_state(
    run: RunState,
    *,
    status: str,
    current_step: int,
    steps: list[Step],
    started: Step | None,
    succeeded_call: ToolCall | None,
    recorded_call: ToolCall | None = None,
) -> dict[str, Any]:
    """The snapshot of the rows as this commit leaves them, from the rows the run holds:
    while the lease is ours nobody else writes them (an outside write bumps the epoch, and
    then the commit carrying this snapshot writes nothing)."""
    if started is not None:
        running = step_as_started(started)
        steps = [running if s.pk == started.pk else s for s in steps]
    calls = [
        call_as(call, LedgerStatus.SUCCEEDED)
        if succeeded_call is not None and pk == succeeded_call.pk
        else call
        for pk, call in sorted(run.calls.items())
    ]
    if recorded_call is not None:
        # Inserted by the same commit (no id yet): the snapshot keys the ledger by key.
        calls.append(recorded_call)
    return snapshot_state(
        task_as(run.task, status=status, current_step=current_step),
        steps,
        calls,
        run.outputs_digest,
    )


def _snapshot_due(run: RunState, steps: list[Step]) -> bool:
    """Every SNAPSHOT_EVERY completed steps (counted in `steps`, the rows as the commit
    leaves them); for long plans every tenth of the plan, since a snapshot grows with the
    plan and its cost per step must not."""
    every = max(int(settings.AGENTOPS["SNAPSHOT_EVERY"]), -(-run.task.step_count // 10))
    done = sum(1 for s in steps if s.status in STEP_DONE)
    return done % every == 0


# -- failures -----------------------------------------------------------------------------


def fail(run: RunState, step: Step, result: StepResult) -> str:
    """Record the step's failure; park for a retry when allowed, else stop for a person."""
    failure = result.failure
    assert failure is not None
    call, outcome = result.call, result.outcome
    record_outcome = call is not None and outcome is not None and call.status != outcome.status
    events: list[EventSpec] = []
    if record_outcome:
        assert call is not None and outcome is not None
        events.append(
            EventSpec(
                f"agentops.ledger.{outcome.status}",
                step=step.ordinal,
                payload={
                    "key": call.idempotency_key,
                    "how": outcome.how,
                    "phase": Phase.AFTER_TOOL_CALL,
                },
                fold={"ledger": {call.idempotency_key: outcome.status}},
            )
        )
    events.append(
        EventSpec(
            STEP_TRANSITIONS["fail"].event,
            step=step.ordinal,
            payload={"failure": failure.as_failure(), "attempt": step.attempts},
            fold={"steps": {str(step.ordinal): StepStatus.FAILED}},
        )
    )
    with transaction.atomic():
        verdict, seq = _park_or_stop_writes(
            run, failure, attempts=step.attempts, events=events, tool=result.tool
        )
        if record_outcome:
            assert call is not None and outcome is not None
            ledger_transition(
                call_id=call.pk,
                target=outcome.status,
                error=failure.as_failure(),
                result=offloaded(outcome.result, path="tool_call.result", task_id=run.task.pk),
            )
        step_transition(step=step, name="fail", error=failure.as_failure(), finished_at=Now())
        snapshot_write(task_id=run.task.pk, seq=seq)
    return verdict


def _park_or_stop_writes(
    run: RunState,
    failure: StepFailure,
    *,
    attempts: int,
    events: list[EventSpec],
    tool: Tool | None = None,
) -> tuple[str, int]:
    """Fenced task write that parks for a retry or stops; the caller writes the snapshot
    once the step and ledger rows are updated in the same transaction."""
    delay = retries.retry_delay(failure, attempts=attempts, task=run.task, tool=tool)
    retry = delay is not None
    fields: dict[str, Any] = {"failure": failure.as_failure()}
    if delay is not None:
        fields["next_run_at"] = db_time_after(delay)
        fields["failure"]["retry_in_seconds"] = round(delay, 3)
    seq = fenced_write(
        run.lease, events, transition="schedule_retry" if retry else "stop", **fields
    )
    return ("retry scheduled" if retry else "stopped"), seq


def park_or_stop(
    run: RunState, failure: StepFailure, *, attempts: int, snapshot: bool = True
) -> str:
    """Park the task for a retry or stop it for a person, as `retries` decides for `failure`
    after `attempts` tries; one commit (and a snapshot unless told not to)."""
    event = EventSpec("agentops.task.failed", payload={"failure": failure.as_failure()})
    with transaction.atomic():
        verdict, seq = _park_or_stop_writes(run, failure, attempts=attempts, events=[event])
        if snapshot:
            snapshot_write(task_id=run.lease.task_id, seq=seq)
    return verdict


def stop(run: RunState, failure: StepFailure, *, snapshot: bool = True) -> str:
    """Stop the task (needs_attention) for a reason outside any one step's attempt. Without
    `snapshot` (rows that disagree with the log) no snapshot blesses the rows as they are:
    the fold a restore rebuilds them from stays the log's."""
    failure.retryable = False
    return park_or_stop(run, failure, attempts=0, snapshot=snapshot)
