"""The runner: one worker, holding the lease, advances a task step by step.

Per step it records the checkpoint phases of DESIGN §5 in two commits around a call with a side
effect:
  1. model result + policy verdict + ledger row `pending` (before the tool runs);
  2. ledger outcome + step completion + the next step's start (or the task's end, or a yield).
A step whose tool only reads, or that calls no tool, commits once: 2 alone, with the model result,
the verdict and the call recorded `succeeded` (nothing is at stake before it: a crash there asks the
model again and reads again). The model is never asked twice for a step whose response is
recorded, and a tool with a side effect never runs for a key whose effect is recorded. Every write
is fenced by the lease epoch (LeaseLost stops the run).
A job runs for one time slice, then yields the task back to the queue; parked tasks hold no worker.
Before each model call and each tool call (after the previous commit) the run passes a safe
point of the fleet's stop button (`stops`, `proposals.safe_point`): a paused task stops there,
and a stop in force that covers the step pauses the task there.

The runner keeps the step loop (`TaskRun`, a `runstate.RunState` with the loop); its commits are
assembled in `stepcommits` and the proposal path (a plan; a step's model call, proposal, checks,
route) is `proposals`: functions over the run. The decisions live beside it, one job each:
`retries` (backoff and attempt caps), `budgets` (budgets, planning loops, confidence collapse),
`planning` (the order of steps), `routing` (the policy verdict for a proposed
call) and `rollback` (compensating a task's effects).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction

from agentops.engine import (
    budgets,
    children,
    handoff,
    planning,
    proposals,
    retries,
    rows,
    stepcommits,
)
from agentops.engine.checkpoints import OutputsDigest, checkpoint_verify
from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import (
    AgentUnavailable,
    CheckpointMismatch,
    FailureKind,
    LeaseLost,
    OrchestrationFailure,
    StepFailure,
    ToolFailure,
    UnknownAgent,
)
from agentops.engine.jsonvalues import loaded
from agentops.engine.leases import Heartbeat
from agentops.engine.ledger import INVALID_OUTPUT_KEY, Outcome, invoke, is_invalid_output, reconcile
from agentops.engine.model import ModelResponse, loaded_response
from agentops.engine.needs import agent_check_available
from agentops.engine.registry import (
    Tool,
    ToolContext,
    get_agent,
    is_fan_out,
    is_handoff,
    registered_tool,
)
from agentops.engine.rollback import Rollback
from agentops.engine.runstate import RunState, StepResult
from agentops.engine.scopes import scopes_held
from agentops.engine.stops import StopReached
from agentops.engine.transitions import (
    EventSpec,
    fenced_commit,
    fenced_write,
    prepared_rows,
    task_claim_row,
)
from agentops.engine.versions import agent_version, model_name, version_check
from agentops.models import Step, ToolCall
from agentops.plumbing import prometheus, tracing
from agentops.plumbing.logs import task_context, task_context_step
from agentops.plumbing.outages import UNAVAILABLE
from agentops.states import STEP_DONE, TASK_TRANSITIONS, LedgerStatus, StepStatus, TaskMode

logger = logging.getLogger(__name__)


def task_advance(*, task_id: int, owner: str, enqueued_by: str | None = None) -> str:
    """Claim the task and advance it for one time slice. Returns what happened, for logs.
    `enqueued_by` is the trace context of what enqueued the job (the slice's span links it)."""
    claimed = task_claim_row(task_id=task_id, owner=owner)
    if claimed is None:
        return "not claimable"
    lease, task = claimed
    crashpoint("after_claim")
    with tracing.slice_span(task, enqueued_by=enqueued_by) as span:
        try:
            with task_context(task_id=task_id), Heartbeat(lease, armed=False) as beat:
                run = TaskRun(lease=lease, http=http_client(), beat=beat, task=task)
                try:
                    outcome = run.advance()
                except Exception as error:
                    run.escaped(error)
                    raise
        except LeaseLost as lost:
            logger.warning("stopping: %s", lost)
            outcome = "lease lost"
        tracing.slice_outcome(span, outcome)
        return outcome


def task_steps(task_id: int) -> list[Step]:
    """The task's steps in plan order."""
    return [rows.instance(Step, row) for row in prepared_rows(_rows_of(Step, "ordinal"), [task_id])]


def task_calls(task_id: int) -> list[ToolCall]:
    """The task's ledger rows, oldest first."""
    return [
        rows.instance(ToolCall, row) for row in prepared_rows(_rows_of(ToolCall, "id"), [task_id])
    ]


@functools.cache
def _rows_of(model: type[Step] | type[ToolCall], order: str) -> str:
    return (
        f'SELECT {rows.columns(model)} FROM "{model._meta.db_table}" WHERE "task_id" = %s '
        f'ORDER BY "{order}"'
    )


@functools.cache
def http_client() -> httpx.Client:
    """One HTTP client per worker process (building one loads the CA bundle: ~30 ms). It is
    session state, never persisted; tools pass their own timeout on every request."""
    return httpx.Client(timeout=settings.AGENTOPS["TOOL_TIMEOUT_SECONDS"])


# The task left `running` because a step (or the task) failed.
FAILED_OUT = frozenset(TASK_TRANSITIONS[name].event for name in ("schedule_retry", "stop"))


def step_tokens(step: Step) -> int:
    """Tokens the provider reported for the step's recorded model response."""
    record = loaded(step.model_response) if step.model_response is not None else None
    usage = record.get("usage") if isinstance(record, dict) else None
    if not isinstance(usage, dict):
        return 0
    return sum(int(usage.get(k) or 0) for k in ("prompt_tokens", "completion_tokens"))


@dataclass
class TaskRun(RunState):
    """One claim's run of a task: its state (`RunState`) and the step loop over it. The loop's
    phases are functions of their sub-domain's module, given the run: the model call and the
    proposal's route are `proposals`', each phase's commit `stepcommits`'."""

    # -- the loop -----------------------------------------------------------------------------

    def advance(self) -> str:
        """Advance the task for one time slice; returns what happened. The prompt cache (and
        the outputs' digest carried between snapshots) is emptied when the slice ends, however
        it ends: the next slice reads the rows again (and could reuse nothing of it), and a
        worker must not carry one task's context into the next while something (a traceback, a
        log record) still refers to this run."""
        try:
            return self._advance()
        finally:
            self.prompts.clear()
            self.outputs_digest = OutputsDigest()

    def escaped(self, error: Exception) -> None:
        """Record an error that escaped the step loop (not a failure the engine classifies: a
        bug) on the step whose try it interrupted, so that the stop at the step's cap quotes it
        (`retries.cap_failure`) rather than saying the try did not finish. The step stays as
        a crash leaves it, for the sweeper to re-drive. Nothing is written for a lost lease or
        an outage (nothing could be), nor outside a running step's try (before one began, after
        it committed its end); the worker's log has the traceback either way."""
        if isinstance(error, (LeaseLost, *UNAVAILABLE)):
            return
        # The run's rows mirror what it committed: at most one step is running, the one whose
        # try was interrupted (the rows are not read yet if the claim's first read failed).
        steps: list[Step] = getattr(self, "steps", [])
        step = next((s for s in steps if s.status == StepStatus.RUNNING), None)
        if step is None:
            return
        failure = OrchestrationFailure(
            f"its try raised {type(error).__name__}: {error}",
            kind=FailureKind.PROCESS_CRASH,
            detail={"escaped": type(error).__name__},
        )
        try:
            with fenced_commit(self.lease, []) as commit:
                commit.step_update(step, error=failure.as_failure())
        except Exception:
            logger.exception("step %s: the error that escaped it could not be recorded", step.pk)

    def _advance(self) -> str:
        self.steps = task_steps(self.task.pk)
        stopped = self._preflight()
        if stopped:
            return stopped
        if self.task.mode == TaskMode.ROLLBACK:
            failure = Rollback(
                lease=self.lease, task=self.task, http=self.http, beat=self.beat
            ).execute()
            return "rolled back" if failure is None else stepcommits.stop(self, failure)
        if not self.steps:
            try:
                self._plan()
            except StepFailure as failure:
                return stepcommits.park_or_stop(self, failure, attempts=self.task.claims)
            except StopReached:
                return "halted by a stop"
        step = self._first_open_step()
        if step is None:
            stepcommits.finish(self)
            return "succeeded"
        if any(s.attempts for s in self.steps):
            self.resumed_at = (
                f"step {step.ordinal + 1} of {self.task.step_count}, "
                f"phase {self.task.phase or 'start'}"
            )
            self.tokens_saved = self._tokens_saved_by_resume()
        if not self._begin(step):
            return "stopped"
        deadline = time.monotonic() + settings.AGENTOPS["SLICE_SECONDS"]
        while True:
            result = self._run_step(step)
            if result.parked:
                return "awaiting approval"
            if result.halted:
                return "halted by a stop"
            if result.failure is not None:
                return stepcommits.fail(self, step, result)
            following = self._first_open_step(after=step)
            if following is None:
                stepcommits.complete(self, step, result, then="succeed")
                return "succeeded"
            if time.monotonic() > deadline:
                stepcommits.complete(self, step, result, then="yield")
                return "yielded"
            if retries.at_cap(self.task, following):
                stepcommits.complete(self, step, result)
                return stepcommits.stop(self, retries.cap_failure(self.task, following))
            stepcommits.complete(self, step, result, begin=following)
            step = following

    def _preflight(self) -> str | None:
        """Checks made once per claim; each failure stops the task with a structured reason."""
        task = self.task
        if task.recoveries > task.recovery_cap:
            return stepcommits.stop(
                self,
                OrchestrationFailure(
                    f"the task was recovered after a crash {task.recoveries} times (cap "
                    f"{task.recovery_cap})",
                    kind=FailureKind.PROCESS_CRASH,
                ),
            )
        try:
            self.agent = get_agent(task.agent)
            # A setting the agent needs that this worker lacks: no step is tried without it.
            agent_check_available(self.agent)
        except (UnknownAgent, AgentUnavailable) as exc:
            return stepcommits.stop(
                self, OrchestrationFailure(str(exc), kind=FailureKind.UNKNOWN_AGENT)
            )
        # No step runs under a declaration other than the one the task pinned (engine/versions).
        self.version, changed = version_check(task.agent_version, self.agent)
        self.model_name = model_name(self.agent)
        if changed is not None:
            return stepcommits.stop(self, changed)
        calls = task_calls(task.pk)
        self.calls = {call.pk: call for call in calls}
        for call in calls:
            self.proposals.setdefault((call.tool, call.args_digest), set()).add(call.step_id)
        try:
            checkpoint_verify(task, self.steps, calls)
        except CheckpointMismatch as exc:
            return stepcommits.stop(
                self,
                OrchestrationFailure(str(exc), kind=FailureKind.CHECKPOINT_MISMATCH),
                snapshot=False,
            )
        return None

    def _tokens_saved_by_resume(self) -> int:
        """Tokens the completed steps spent (and the current step's recorded model response,
        which is not asked for again), when this claim is a recovery: it takes over from a
        holder that died while running, or it is the first claim after the task failed (a
        backoff retry, or a person's retry). A rerun from scratch would spend them again. Gates,
        pauses and plain continuations after a time slice save nothing new."""
        from agentops.models import Event

        latest = list(
            Event.objects.filter(
                task_id=self.task.pk,
                seq__lte=self.lease.last_seq,
                action__in=budgets.LEFT_RUNNING | {budgets.CLAIMED},
            )
            .order_by("-seq")
            .values_list("action", "payload")[:2]
        )
        recovered = bool(latest and (latest[0][1] or {}).get("recovered"))
        after_failure = len(latest) > 1 and latest[1][0] in FAILED_OUT
        if not (recovered or after_failure):
            return 0
        return sum(
            step_tokens(s)
            for s in self.steps
            if s.status in STEP_DONE or s.model_response is not None
        )

    def _first_open_step(self, after: Step | None = None) -> Step | None:
        return planning.next_open_step(self.steps, after=after.ordinal if after is not None else -1)

    def _begin(self, step: Step) -> bool:
        """Start `step` in its own commit (the first step of a claim). Counts the attempt."""
        if retries.at_cap(self.task, step):
            stepcommits.stop(self, retries.cap_failure(self.task, step))
            return False
        events, fields = stepcommits.begin_events(self, step)
        with fenced_commit(self.lease, events, **fields) as commit:
            stepcommits.begin_rows(self, commit, step, events)
        return True

    # -- phases 2-3: model_result, before_tool_call --------------------------------------------

    def _run_step(self, step: Step) -> StepResult:
        task_context_step(step.ordinal)
        with tracing.step_span(step) as span:
            result = self._step_result(step)
            tracing.step_outcome(span, result.failure)
            return result

    def _step_result(self, step: Step) -> StepResult:
        try:
            if is_handoff(step):
                handed = handoff.handoff_run(
                    lease=self.lease, task=self.task, step=step, steps=self.steps
                )
                self.agent, self.steps = handed.agent, handed.steps
                self.version, self.model_name = agent_version(self.agent), model_name(self.agent)
                return StepResult(output=handed.output)
            if is_fan_out(step):
                collected = children.fan_out_run(
                    lease=self.lease, task=self.task, step=step, steps=self.steps
                )
                return StepResult(output=collected.output, parked=collected.parked)
            fresh = step.model_response is None
            if fresh:
                # The safe point before the model call (`engine.stops`).
                proposals.safe_point(self, step)
                response = proposals.ask_model(self, step)
            else:
                response = ModelResponse.from_record(loaded_response(step.model_response))
            if not response.tool_calls:
                # A new reply is recorded by the step's one commit, with its completion.
                reply = proposals.model_result(self, step, response) if fresh else None
                return StepResult(output={"text": response.text}, unrecorded_reply=reply)
            name = response.tool_calls[0]["name"]
            tool = proposals.proposed_tool(self, name) if fresh else registered_tool(name)
            call = None if fresh else proposals.live_call(step)
            if call is None:
                if not fresh and retries.has_failed_try(step):
                    proposals.safe_point(self, step, tool=tool)
                    call = proposals.reopen_call(self, step, tool)
                else:
                    call = proposals.route(self, step, response, tool, record=fresh)
                if call is None:
                    return StepResult(parked=True)
        except StepFailure as failure:
            return StepResult(failure=failure)
        except StopReached:
            return StepResult(halted=True)
        deferred, self.deferred = self.deferred, None
        arguments = deferred.arguments if deferred is not None else self.call_arguments.get(call.pk)
        self.call_arguments.pop(call.pk, None)
        if arguments is None:
            arguments = loaded(call.args)
        # A read runs before its routing is committed (with the step's completion): its lane is
        # the verdict's, not yet the step's.
        lane = deferred.verdict.route if deferred is not None else step.route
        outcome = self._execute(step, tool, call, arguments, lane=lane)
        if outcome.status != LedgerStatus.SUCCEEDED or outcome.failure is not None:
            if deferred is not None:
                # The failure is recorded on a committed `pending` row, as for any call.
                call = proposals.open_deferred(self, deferred)
            refused = outcome.failure or OrchestrationFailure("the tool call failed")
            refused.detail.setdefault(
                "ledger",
                {"key": call.idempotency_key, "status": outcome.status, "how": outcome.how},
            )
            return StepResult(call=call, outcome=outcome, failure=refused, tool=tool)
        return StepResult(
            output=outcome.result or {},
            call=call,
            outcome=outcome,
            tool=tool,
            unrecorded_call=deferred,
        )

    # -- the tool call --------------------------------------------------------------------------

    def _execute(
        self, step: Step, tool: Tool, call: ToolCall, arguments: dict[str, Any], *, lane: str
    ) -> Outcome:
        if call.status == LedgerStatus.SUCCEEDED:
            result = loaded(call.result)
            if is_invalid_output(result):
                # The effect happened but its output was rejected: never pass it on as a result.
                return Outcome(
                    LedgerStatus.SUCCEEDED,
                    result=result,
                    failure=ToolFailure(
                        f"{tool.name}: the recorded call's output was rejected "
                        f"({result[INVALID_OUTPUT_KEY]}); skip the step or abort",
                        kind=FailureKind.OUTPUT_INVALID,
                    ),
                    how="recorded",
                )
            return Outcome(LedgerStatus.SUCCEEDED, result=result, how="recorded")
        if call.status == LedgerStatus.EXECUTED_UNKNOWN:
            return Outcome(
                LedgerStatus.EXECUTED_UNKNOWN,
                failure=OrchestrationFailure(
                    f"{tool.name}: waiting for a person to confirm whether the effect happened",
                    kind=FailureKind.SIDE_EFFECT_UNKNOWN,
                ),
                how="recorded",
            )
        ctx = ToolContext(
            idempotency_key=call.idempotency_key,
            task_id=self.task.pk,
            step=step.ordinal,
            http=self.http,
            base_url=settings.AGENTOPS["SIM_BASE_URL"].rstrip("/"),
            timeout=tool.timeout_or(settings.AGENTOPS["TOOL_TIMEOUT_SECONDS"]),
            scopes=scopes_held(self.task, self.agent),
            answer=(step.approval or {}).get("answer"),
        )
        fresh = call.pk is None or call.pk in self.fresh_calls
        with (
            self.beat.call(),
            prometheus.timed("tool"),
            tracing.tool_span(call, lane=lane, how="invoke" if fresh else "reconcile") as span,
        ):
            # A `pending` row from an earlier holder: the call may have reached the remote.
            outcome = (
                invoke(tool, ctx, arguments)
                if fresh
                else reconcile(tool, ctx, arguments, cause=None)
            )
            tracing.tool_outcome(span, outcome.status, outcome.failure)
            return outcome

    # -- the plan -------------------------------------------------------------------------------

    def _plan(self) -> None:
        """Agents without a fixed plan ask the model for one; the plan is committed as steps."""
        budgets.check_budgets(self.task)
        proposals.safe_point(self, None)
        steps = proposals.plan_propose(agent=self.agent, task=self.task, beat=self.beat)
        event = EventSpec(
            "agentops.task.planned",
            payload={"steps": len(steps)},
            fold={"steps": {str(s.ordinal): StepStatus.PENDING for s in steps}},
        )
        with transaction.atomic():
            fenced_write(self.lease, [event], step_count=len(steps))
            Step.objects.bulk_create(steps)
        self.task.step_count = len(steps)
        self.steps = list(Step.objects.filter(task=self.task).order_by("ordinal"))
