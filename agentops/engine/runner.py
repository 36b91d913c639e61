"""The runner: one worker, holding the lease, advances a task step by step.

Per step it records the checkpoint phases of DESIGN §5 in two commits around each external call:
  1. model result + policy verdict + ledger row `pending` (before the tool runs);
  2. ledger outcome + step completion + the next step's start (or the task's end, or a yield).
The model is never asked twice for a step whose response is recorded, and a tool never runs for a
key whose effect is recorded. Every write is fenced by the lease epoch (LeaseLost stops the run).
A job runs for one time slice, then yields the task back to the queue; parked tasks hold no worker.

The runner keeps the step loop and the commits; the decisions live beside it, one job each:
`retries` (backoff and attempt caps), `budgets` (budgets, planning loops, confidence collapse),
`planning` (asking for a plan, the order of steps), `routing` (the policy verdict for a proposed
call) and `rollback` (compensating a task's effects).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from agentops import prometheus
from agentops.engine import budgets, children, gates, handoff, planning, retries, routing, rows
from agentops.engine import context as ctxbuild
from agentops.engine.checkpoints import checkpoint_verify, snapshot_state, snapshot_write
from agentops.engine.crashpoints import crashpoint
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import (
    CheckpointMismatch,
    LeaseLost,
    ModelFailure,
    OrchestrationFailure,
    StepFailure,
    ToolFailure,
    UnknownAgent,
    UnknownTool,
)
from agentops.engine.jsonvalues import (
    Encoded,
    is_pointer,
    loaded,
    offloaded,
    redacted,
)
from agentops.engine.leases import Heartbeat
from agentops.engine.ledger import (
    INVALID_OUTPUT_KEY,
    Outcome,
    arguments_encoded,
    idempotency_key,
    invoke,
    is_invalid_output,
    reconcile,
)
from agentops.engine.model import (
    ModelRequest,
    ModelResponse,
    get_model_adapter,
    loaded_response,
    record_pointing_at,
)
from agentops.engine.registry import Agent, Tool, ToolContext, get_agent, get_tool, registered_tool
from agentops.engine.rollback import Rollback
from agentops.engine.routing import Verdict
from agentops.engine.transitions import (
    Commit,
    EventSpec,
    Lease,
    call_as,
    db_time_after,
    fenced_commit,
    fenced_write,
    ledger_transition,
    prepared_rows,
    step_as_done,
    step_as_started,
    step_transition,
    task_as,
    task_claim_row,
)
from agentops.logs import task_context, task_context_step
from agentops.models import Step, Task, ToolCall
from agentops.states import (
    STEP_DONE,
    STEP_TRANSITIONS,
    TASK_TRANSITIONS,
    LedgerStatus,
    Phase,
    StepStatus,
    TaskMode,
)

logger = logging.getLogger(__name__)


def task_advance(*, task_id: int, owner: str) -> str:
    """Claim the task and advance it for one time slice. Returns what happened, for logs."""
    claimed = task_claim_row(task_id=task_id, owner=owner)
    if claimed is None:
        return "not claimable"
    lease, task = claimed
    crashpoint("after_claim")
    try:
        with task_context(task_id=task_id), Heartbeat(lease, armed=False) as beat:
            return TaskRun(lease=lease, http=http_client(), beat=beat, task=task).advance()
    except LeaseLost as lost:
        logger.warning("stopping: %s", lost)
        return "lease lost"


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
class StepResult:
    """What running a step produced: an output, or a failure (with the ledger outcome if any)."""

    output: dict[str, Any] | None = None
    call: ToolCall | None = None
    outcome: Outcome | None = None
    failure: StepFailure | None = None
    tool: Tool | None = None
    # The step's action waits at a gate: the task is parked and the job ends.
    parked: bool = False


@dataclass
class Routed:
    """A proposed call with its verdict, and the task writes (the model result, if new) that
    commit with it: a gate, or a `pending` ledger row."""

    step: Step
    tool: Tool
    arguments: dict[str, Any]
    edited: bool
    verdict: Verdict
    digest: str
    # The arguments serialized once (the digest above is its sha256).
    known: Encoded
    events: list[EventSpec] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=lambda: {"phase": Phase.BEFORE_TOOL_CALL})
    response_record: dict[str, Any] | None = None
    # The arguments to run are the model's proposal itself (no person's approval replaced
    # them): the record can point at their artifact.
    proposal_runs: bool = False


@dataclass
class TaskRun:
    lease: Lease
    http: httpx.Client
    beat: Heartbeat
    # The row as the claim left it.
    task: Task
    agent: Agent = field(init=False)
    steps: list[Step] = field(init=False)
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The estimate of `messages` made while building them (recorded next to reported usage).
    prompt_estimate: int = 0
    resumed_at: str | None = None
    fresh_calls: set[int] = field(default_factory=set)
    # (tool, args digest) -> the steps that proposed it: loop detection without a query per step.
    proposals: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    # Tokens of completed steps that this resume does not spend again (recorded with the next
    # step's start).
    tokens_saved: int = 0
    # The task's ledger rows by id, as this run last wrote them (the in-memory snapshot's).
    calls: dict[int, ToolCall] = field(default_factory=dict)
    call_arguments: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Worked seconds at the first budget check of this claim, and the monotonic clock then.
    worked_at: tuple[float, float] | None = None
    # What this slice's prompts made, for its next prompts (bounded by bytes; see `advance`).
    prompts: ctxbuild.PromptCache = field(default_factory=ctxbuild.PromptCache)

    # -- the loop -----------------------------------------------------------------------------

    def advance(self) -> str:
        """Advance the task for one time slice; returns what happened. The prompt cache is
        emptied when the slice ends, however it ends: the next slice reads the rows again (and
        could reuse nothing of it), and a worker must not carry one task's context into the
        next while something (a traceback, a log record) still refers to this run."""
        try:
            return self._advance()
        finally:
            self.prompts.clear()

    def _advance(self) -> str:
        self.steps = task_steps(self.task.pk)
        stopped = self._preflight()
        if stopped:
            return stopped
        if self.task.mode == TaskMode.ROLLBACK:
            failure = Rollback(
                lease=self.lease, task=self.task, http=self.http, beat=self.beat
            ).execute()
            return "rolled back" if failure is None else self._stop(failure)
        if not self.steps:
            try:
                self._plan()
            except StepFailure as failure:
                return self._park_or_stop(failure, attempts=self.task.claims)
        step = self._first_open_step()
        if step is None:
            self._finish()
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
            if result.failure is not None:
                return self._fail(step, result)
            following = self._first_open_step(after=step)
            if following is None:
                self._complete(step, result, then="succeed")
                return "succeeded"
            if time.monotonic() > deadline:
                self._complete(step, result, then="yield")
                return "yielded"
            if retries.at_cap(self.task, following):
                self._complete(step, result)
                return self._stop(retries.cap_failure(self.task, following))
            self._complete(step, result, begin=following)
            step = following

    def _preflight(self) -> str | None:
        """Checks made once per claim; each failure stops the task with a structured reason."""
        task = self.task
        if task.recoveries > task.recovery_cap:
            return self._stop(
                OrchestrationFailure(
                    f"the task was recovered after a crash {task.recoveries} times (cap "
                    f"{task.recovery_cap})",
                    kind="process_crash",
                )
            )
        try:
            self.agent = get_agent(task.agent)
        except UnknownAgent as exc:
            return self._stop(OrchestrationFailure(str(exc), kind="unknown_agent"))
        calls = task_calls(task.pk)
        self.calls = {call.pk: call for call in calls}
        for call in calls:
            self.proposals.setdefault((call.tool, call.args_digest), set()).add(call.step_id)
        try:
            checkpoint_verify(task, self.steps, calls)
        except CheckpointMismatch as exc:
            return self._stop(OrchestrationFailure(str(exc), kind="checkpoint_mismatch"))
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

    # -- phase 1: before_model_call -----------------------------------------------------------

    def _begin_events(
        self, step: Step, steps: list[Step] | None = None
    ) -> tuple[list[EventSpec], dict[str, Any]]:
        """Events and task fields that start `step`. Builds the step's prompt as a side effect,
        from `steps` (default: the run's view of the steps)."""
        overflowed = (step.error or {}).get("kind") == "context_overflow"
        view = self.steps if steps is None else steps
        built = ctxbuild.build_context(
            agent=self.agent,
            task=self.task,
            steps=view,
            scale=ctxbuild.calibration(view, before=step),
            current=step,
            resumed_at=self.resumed_at,
            notes=self._notes(step),
            # After a context overflow, summarize more of the earlier work, in half the budget.
            recent=1 if overflowed else None,
            budget=ctxbuild.budget_for(self.agent) // 2 if overflowed else None,
            cache=self.prompts,
        )
        self.messages = built.messages
        self.prompt_estimate = built.estimate
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
        fields: dict[str, Any] = {"current_step": step.ordinal, "phase": Phase.BEFORE_MODEL_CALL}
        if self.tokens_saved:
            payload["tokens_saved_by_resume"] = self.tokens_saved
            fields["tokens_saved"] = F("tokens_saved") + self.tokens_saved
            self.tokens_saved = 0
        event = EventSpec(
            STEP_TRANSITIONS["start"].event,
            step=step.ordinal,
            payload=payload,
            fold={"steps": {str(step.ordinal): StepStatus.RUNNING}, "current_step": step.ordinal},
        )
        return [event], fields

    def _begin_rows(self, commit: Commit, step: Step, events: list[EventSpec]) -> None:
        """Start the step's row in `commit`; a step that cannot start refuses the commit
        (CheckpointMismatch)."""
        commit.step(
            step,
            "start",
            required=True,
            attempts=step.attempts + 1,
            prompt_digest=events[0].payload["prompt_digest"],
            started_at=Now(),
            error=None,
        )

    def _begin(self, step: Step) -> bool:
        """Start `step` in its own commit (the first step of a claim). Counts the attempt."""
        if retries.at_cap(self.task, step):
            self._stop(retries.cap_failure(self.task, step))
            return False
        events, fields = self._begin_events(step)
        with fenced_commit(self.lease, events, **fields) as commit:
            self._begin_rows(commit, step, events)
        return True

    # -- phases 2-3: model_result, before_tool_call --------------------------------------------

    def _run_step(self, step: Step) -> StepResult:
        task_context_step(step.ordinal)
        try:
            if handoff.is_handoff(step):
                handed = handoff.handoff_run(
                    lease=self.lease, task=self.task, step=step, steps=self.steps
                )
                self.agent, self.steps = handed.agent, handed.steps
                return StepResult(output=handed.output)
            if children.is_fan_out(step):
                collected = children.fan_out_run(
                    lease=self.lease, task=self.task, step=step, steps=self.steps
                )
                return StepResult(output=collected.output, parked=collected.parked)
            fresh = step.model_response is None
            if fresh:
                response = self._ask_model(step)
            else:
                response = ModelResponse.from_record(loaded_response(step.model_response))
            if not response.tool_calls:
                if fresh:
                    self._record_text_reply(step, response)
                return StepResult(output={"text": response.text})
            name = response.tool_calls[0]["name"]
            tool = self._proposed_tool(name) if fresh else registered_tool(name)
            call = None if fresh else self._live_call(step)
            if call is None:
                if not fresh and retries.has_failed_try(step):
                    call = self._reopen_call(step, tool)
                else:
                    call = self._route(step, response, tool, record=fresh)
                if call is None:
                    return StepResult(parked=True)
        except StepFailure as failure:
            return StepResult(failure=failure)
        arguments = self.call_arguments.pop(call.pk, None)
        if arguments is None:
            arguments = loaded(call.args)
        outcome = self._execute(step, tool, call, arguments)
        if outcome.status != LedgerStatus.SUCCEEDED or outcome.failure is not None:
            refused = outcome.failure or OrchestrationFailure("the tool call failed")
            refused.detail.setdefault(
                "ledger",
                {"key": call.idempotency_key, "status": outcome.status, "how": outcome.how},
            )
            return StepResult(call=call, outcome=outcome, failure=refused, tool=tool)
        return StepResult(output=outcome.result or {}, call=call, outcome=outcome, tool=tool)

    def _ask_model(self, step: Step) -> ModelResponse:
        budgets.check_budgets(self.task, worked=self._worked_seconds)
        request = ModelRequest(
            agent=self.agent.name,
            task_id=self.task.pk,
            step=step.ordinal,
            step_title=step.title,
            attempt=step.attempts,
            messages=self.messages,
            tools=[get_tool(name).schema() for name in self.agent.tools],
            task_input=self.task.input,
            prompt_estimate=self.prompt_estimate,
        )
        with self.beat.call(), prometheus.timed("model"):
            response = get_model_adapter(self.agent).complete(request)
        # Recorded next to the provider's count, so later prompts calibrate the estimate.
        record = response.as_record()
        record["usage"] = {**response.usage, "prompt_estimate": self.prompt_estimate}
        # Model output is untrusted: a leaked credential must not reach the database (nor run).
        # What the database cannot store failed in the adapter (`model.response_from`).
        return ModelResponse.from_record(redacted(record))

    def _model_result(
        self, step: Step, response: ModelResponse
    ) -> tuple[EventSpec, dict[str, Any], Any]:
        """The model_result event, the task's usage increments and the record to store (offload
        it inside the caller's transaction, so an artifact row commits with its pointer)."""
        record = response.as_record()
        usage = response.usage
        tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        cost = Decimal(tokens) * Decimal(str(settings.AGENTOPS["COST_PER_1K_TOKENS"])) / 1000
        calls = response.tool_calls
        event = EventSpec(
            "agentops.step.model_result",
            step=step.ordinal,
            payload={
                "usage": usage,
                "confidence": response.confidence,
                "tool": calls[0]["name"] if calls else None,
                "phase": Phase.MODEL_RESULT,
            },
        )
        self.task.tokens_used += tokens
        self.task.cost_used += cost
        usage_fields = {
            "tokens_used": F("tokens_used") + tokens,
            "cost_used": F("cost_used") + cost,
        }
        return event, usage_fields, record

    def _record_text_reply(self, step: Step, response: ModelResponse) -> None:
        event, usage_fields, record = self._model_result(step, response)
        with fenced_commit(self.lease, [event], phase=Phase.MODEL_RESULT, **usage_fields) as commit:
            stored = commit.offloaded(record, path="step.model_response", task_id=self.task.pk)
            commit.step_update(step, model_response=stored)
        step.model_response = stored
        crashpoint("after_model_result", step=step.ordinal)

    def _route(
        self, step: Step, response: ModelResponse, tool: Tool, *, record: bool
    ) -> ToolCall | None:
        """Route the proposed action and commit the outcome with the model result (if new):
        a `pending` ledger row (auto, audit: plus an audit item), or a gate that parks the task
        (returns None). A denied action raises authorization_gap."""
        arguments, edited = routing.effective_arguments(step, tool, response.tool_calls[0])
        # Serialized and digested once: the contract check, the loop check, the ledger key, the
        # gate binding and the arguments' artifact all use it.
        known = arguments_encoded(arguments)
        digest = known.sha256
        if record:
            self._check_proposal(step, response, tool, arguments, known)
        verdict = routing.verdict_for(
            task=self.task,
            tool=tool,
            arguments=arguments,
            step=step.ordinal,
            confidence=response.confidence,
            edited=edited,
        )
        routed = Routed(
            step=step,
            tool=tool,
            arguments=arguments,
            edited=edited,
            verdict=verdict,
            digest=digest,
            known=known,
        )
        if record:
            event, usage_fields, routed.response_record = self._model_result(step, response)
            routed.events.append(event)
            routed.fields.update(usage_fields)
            routed.proposal_runs = arguments is response.tool_calls[0]["arguments"]
        if verdict.route == "gate" and not routing.approved(step, routed.digest, verdict):
            self._park_at_gate(routed)
            return None
        call = self._open_call(routed)
        if record:
            crashpoint("after_model_result", step=step.ordinal)
        crashpoint("after_pending", step=step.ordinal)
        self.fresh_calls.add(call.pk)
        # The arguments just stored (perhaps as an artifact) are run from memory, not read back.
        self.call_arguments[call.pk] = routed.arguments
        self.calls[call.pk] = call
        self.proposals.setdefault((tool.name, routed.digest), set()).add(step.pk)
        return call

    def _check_proposal(
        self,
        step: Step,
        response: ModelResponse,
        tool: Tool,
        arguments: dict[str, Any],
        known: Encoded,
    ) -> None:
        """Checks on a new proposal, before it is routed: its arguments fit the tool, it is not
        a planning loop, and the model's confidence has not collapsed."""
        tool.check_arguments(arguments, text=known.data if known.exact else None)
        budgets.check_loop(self.proposals, step, tool, arguments, digest=known.sha256)
        budgets.check_confidence(self.agent, self.steps, step, response)

    def _park_at_gate(self, routed: Routed) -> None:
        """Commit the gate, the routing (and model result) and the `await_approval` transition
        together, with a snapshot: the job ends and no worker waits for the decision."""
        step = routed.step
        payload = routing.routed_payload(
            tool=routed.tool, verdict=routed.verdict, digest=routed.digest
        )
        events = [
            *routed.events,
            EventSpec("agentops.step.gated", step=step.ordinal, payload=payload),
        ]
        with fenced_commit(
            self.lease, events, transition="await_approval", **routed.fields
        ) as commit:
            self._store_step(
                commit, step, routing.step_routing(routed.verdict), routed.response_record
            )
            # The gate's rows commit with the step's.
            commit.in_transaction()
            gates.gate_open(
                task=self.task,
                step=step,
                tool=routed.tool,
                arguments=routed.arguments,
                args_digest=routed.digest,
                verdict=routed.verdict,
                edited=routed.edited,
            )
            snapshot_write(task_id=self.task.pk, seq=commit.seq)

    def _open_call(self, routed: Routed) -> ToolCall:
        """Commit the `pending` ledger row (and an audit item when the call is audited) with the
        routing and the model result, before the tool runs."""
        step, tool, verdict = routed.step, routed.tool, routed.verdict
        key = idempotency_key(
            task_id=self.task.pk, step_id=step.pk, tool=tool.name, args_digest=routed.digest
        )
        payload = routing.routed_payload(tool=tool, verdict=verdict, digest=routed.digest)
        event = EventSpec(
            "agentops.ledger.pending",
            step=step.ordinal,
            payload={**payload, "key": key},
            fold={"ledger": {key: LedgerStatus.PENDING}},
        )
        with fenced_commit(self.lease, [*routed.events, event], **routed.fields) as commit:
            args = commit.offloaded(
                routed.arguments, path="tool_call.args", task_id=self.task.pk, known=routed.known
            )
            record = routed.response_record
            if record is not None and routed.proposal_runs and is_pointer(args):
                # The proposal is stored once: the step's record points at the row's artifact.
                record = record_pointing_at(record, args)
            self._store_step(commit, step, routing.step_routing(verdict), record)
            call = commit.call_create(
                task=self.task,
                step=step,
                tool=tool.name,
                side_effect=tool.side_effect,
                args=args,
                args_digest=routed.digest,
                idempotency_key=key,
            )
            if routing.audited(verdict, step):
                # The audit item names the new row: it commits with it.
                commit.in_transaction()
                gates.audit_item_create(
                    task=self.task,
                    step=step,
                    call=call,
                    verdict=verdict,
                    sampled=verdict.route != "audit",
                )
        return call

    def _store_step(
        self,
        commit: Commit,
        step: Step,
        fields: dict[str, Any],
        response_record: dict[str, Any] | None,
    ) -> None:
        """Write the routing fields (and a new model response) on the step, in `commit`."""
        if response_record is not None:
            fields["model_response"] = commit.offloaded(
                response_record, path="step.model_response", task_id=self.task.pk
            )
            step.model_response = fields["model_response"]
        commit.step_update(step, **fields)

    def _proposed_tool(self, name: str) -> Tool:
        if name not in self.agent.tools:
            raise ModelFailure(
                f"the model proposed tool {name!r}, which agent {self.agent.name} does not have",
                kind="output_invalid",
            )
        try:
            return get_tool(name)
        except UnknownTool as exc:
            raise ModelFailure(str(exc), kind="output_invalid") from None

    def _live_call(self, step: Step) -> ToolCall | None:
        """The step's ledger row that still counts (failed tries are history)."""
        return (
            ToolCall.objects.filter(step=step, compensation_of__isnull=True)
            .exclude(status=LedgerStatus.FAILED)
            .order_by("-id")
            .first()
        )

    def _reopen_call(self, step: Step, tool: Tool) -> ToolCall:
        """A new `pending` row with the same key, after the previous try failed."""
        failed = ToolCall.objects.filter(step=step, status=LedgerStatus.FAILED).order_by("-id")[0]
        event = EventSpec(
            "agentops.ledger.pending",
            step=step.ordinal,
            payload={
                "tool": tool.name,
                "key": failed.idempotency_key,
                "retry": True,
                "phase": Phase.BEFORE_TOOL_CALL,
            },
            fold={"ledger": {failed.idempotency_key: LedgerStatus.PENDING}},
        )
        with transaction.atomic():
            fenced_write(self.lease, [event], phase=Phase.BEFORE_TOOL_CALL)
            call = ToolCall.objects.create(
                task=self.task,
                step=step,
                tool=tool.name,
                side_effect=tool.side_effect,
                args=failed.args,
                args_digest=failed.args_digest,
                idempotency_key=failed.idempotency_key,
            )
            # The audit queue follows the live row: one item per executed call, never one on a
            # failed try while the re-issued call goes unreviewed.
            gates.audit_item_follow(from_call_id=failed.pk, to_call=call)
        self.fresh_calls.add(call.pk)
        self.calls[call.pk] = call
        return call

    # -- the tool call --------------------------------------------------------------------------

    def _execute(
        self, step: Step, tool: Tool, call: ToolCall, arguments: dict[str, Any]
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
                        kind="output_invalid",
                    ),
                    how="recorded",
                )
            return Outcome(LedgerStatus.SUCCEEDED, result=result, how="recorded")
        if call.status == LedgerStatus.EXECUTED_UNKNOWN:
            return Outcome(
                LedgerStatus.EXECUTED_UNKNOWN,
                failure=OrchestrationFailure(
                    f"{tool.name}: waiting for a person to confirm whether the effect happened",
                    kind="side_effect_unknown",
                ),
                how="recorded",
            )
        ctx = ToolContext(
            idempotency_key=call.idempotency_key,
            task_id=self.task.pk,
            step=step.ordinal,
            http=self.http,
            base_url=settings.AGENTOPS["SIM_BASE_URL"].rstrip("/"),
            timeout=settings.AGENTOPS["TOOL_TIMEOUT_SECONDS"],
        )
        with self.beat.call(), prometheus.timed("tool"):
            if call.pk in self.fresh_calls:
                return invoke(tool, ctx, arguments)
            # A `pending` row from an earlier holder: the call may have reached the remote.
            return reconcile(tool, ctx, arguments, cause=None)

    # -- phases 4-5: after_tool_call, step_complete --------------------------------------------

    def _complete(
        self,
        step: Step,
        result: StepResult,
        *,
        begin: Step | None = None,
        then: Literal["succeed", "yield"] | None = None,
    ) -> None:
        """Commit the tool outcome and the step's completion with what comes next: the next
        step's start (`begin`), or the task's transition `then` (a yield at the end of the slice,
        or its success), or nothing (the loop goes on in this slice)."""
        crashpoint("after_tool_call", step=step.ordinal)
        call, outcome = result.call, result.outcome
        record_outcome = (
            call is not None and outcome is not None and call.status != LedgerStatus.SUCCEEDED
        )
        events: list[EventSpec] = []
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
            begin.ordinal
            if begin
            else (self.task.step_count if then == "succeed" else step.ordinal + 1)
        )
        events.append(
            EventSpec(
                STEP_TRANSITIONS["succeed"].event,
                step=step.ordinal,
                payload={"phase": Phase.STEP_COMPLETE},
                fold={"steps": {str(step.ordinal): StepStatus.SUCCEEDED}, "current_step": progress},
            )
        )
        fields: dict[str, Any] = {"current_step": progress, "phase": Phase.STEP_COMPLETE}
        transition = then
        with fenced_commit(self.lease, events, transition=transition, **fields) as commit:
            output = commit.offloaded(
                result.output,
                path="step.output",
                task_id=self.task.pk,
                known=outcome.known
                if outcome is not None and result.output is outcome.result
                else None,
            )
            done = step_as_done(step, output=output)
            view = [done if s.id == step.id else s for s in self.steps]
            begin_events: list[EventSpec] = []
            if begin is not None:
                # Same commit, no external call in between: the next step starts here, with a
                # prompt built from this step as it reads once committed.
                begin_events, begin_fields = self._begin_events(begin, steps=view)
                commit.events.extend(begin_events)
                commit.fields.update(begin_fields)
            if record_outcome:
                assert call is not None and outcome is not None
                # The step's output is the tool's result: one stored copy (one artifact) serves
                # both rows.
                stored = (
                    output
                    if result.output is outcome.result
                    else commit.offloaded(
                        outcome.result, path="tool_call.result", task_id=self.task.pk
                    )
                )
                commit.ledger(call, LedgerStatus.SUCCEEDED, result=stored)
            commit.step(step, "succeed", finished_at=Now(), output=output)
            if begin is not None:
                self._begin_rows(commit, begin, begin_events)
            if transition == "succeed" or self._snapshot_due(view):
                commit.snapshot(
                    self._snapshot_state(
                        status=commit.fields.get("status", self.task.status),
                        current_step=progress,
                        steps=view,
                        started=begin,
                        succeeded_call=call if record_outcome else None,
                    )
                )
            # Nothing is sent before the block ends: a worker killed here commits nothing.
            crashpoint("inside_step_complete", step=step.ordinal)
        if transition == "yield":
            task_enqueue(self.task.pk, token=commit.seq)

    def _finish(self) -> None:
        """Every step is done (e.g. the last one was skipped by a person): the task succeeds."""
        event = EventSpec("agentops.task.completed", fold={"current_step": self.task.step_count})
        with transaction.atomic():
            seq = fenced_write(
                self.lease,
                [event],
                transition="succeed",
                current_step=self.task.step_count,
                phase=Phase.STEP_COMPLETE,
            )
            snapshot_write(task_id=self.task.pk, seq=seq)

    def _snapshot_state(
        self,
        *,
        status: str,
        current_step: int,
        steps: list[Step],
        started: Step | None,
        succeeded_call: ToolCall | None,
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
            for pk, call in sorted(self.calls.items())
        ]
        return snapshot_state(
            task_as(self.task, status=status, current_step=current_step), steps, calls
        )

    def _snapshot_due(self, steps: list[Step]) -> bool:
        """Every SNAPSHOT_EVERY completed steps (counted in `steps`, the rows as the commit
        leaves them); for long plans every tenth of the plan, since a snapshot grows with the
        plan and its cost per step must not."""
        every = max(int(settings.AGENTOPS["SNAPSHOT_EVERY"]), -(-self.task.step_count // 10))
        done = sum(1 for s in steps if s.status in STEP_DONE)
        return done % every == 0

    # -- failures -----------------------------------------------------------------------------

    def _fail(self, step: Step, result: StepResult) -> str:
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
            verdict, seq = self._park_or_stop_writes(
                failure, attempts=step.attempts, events=events, tool=result.tool
            )
            if record_outcome:
                assert call is not None and outcome is not None
                ledger_transition(
                    call_id=call.pk,
                    target=outcome.status,
                    error=failure.as_failure(),
                    result=offloaded(outcome.result, path="tool_call.result", task_id=self.task.pk),
                )
            step_transition(step=step, name="fail", error=failure.as_failure(), finished_at=Now())
            snapshot_write(task_id=self.task.pk, seq=seq)
        return verdict

    def _park_or_stop_writes(
        self,
        failure: StepFailure,
        *,
        attempts: int,
        events: list[EventSpec],
        tool: Tool | None = None,
    ) -> tuple[str, int]:
        """Fenced task write that parks for a retry or stops; the caller writes the snapshot
        once the step and ledger rows are updated in the same transaction."""
        delay = retries.retry_delay(failure, attempts=attempts, task=self.task, tool=tool)
        retry = delay is not None
        fields: dict[str, Any] = {"failure": failure.as_failure()}
        if delay is not None:
            fields["next_run_at"] = db_time_after(delay)
            fields["failure"]["retry_in_seconds"] = round(delay, 3)
        seq = fenced_write(
            self.lease, events, transition="schedule_retry" if retry else "stop", **fields
        )
        return ("retry scheduled" if retry else "stopped"), seq

    def _park_or_stop(self, failure: StepFailure, *, attempts: int) -> str:
        event = EventSpec("agentops.task.failed", payload={"failure": failure.as_failure()})
        with transaction.atomic():
            verdict, seq = self._park_or_stop_writes(failure, attempts=attempts, events=[event])
            snapshot_write(task_id=self.lease.task_id, seq=seq)
        return verdict

    def _stop(self, failure: StepFailure) -> str:
        """Stop the task (needs_attention) for a reason outside any one step's attempt."""
        failure.retryable = False
        return self._park_or_stop(failure, attempts=0)

    def _worked_seconds(self) -> float:
        """`budgets.worked_seconds`, read from the event log once per claim, then advanced by
        the run's own clock: while it holds the lease, the task is running."""
        if self.worked_at is None:
            self.worked_at = (budgets.worked_seconds(self.task.pk), time.monotonic())
        base, since = self.worked_at
        return base + time.monotonic() - since

    def _notes(self, step: Step) -> list[str]:
        """Reviewers' notes on the step, plus a repair note when its last reply was invalid."""
        notes = [n for n in (step.spec.get("notes") or []) if isinstance(n, str)]
        last = step.error or {}
        if last.get("kind") == "output_invalid":
            notes.append(
                f"Your previous reply for this step was rejected: {last.get('message', '')}. "
                "Answer with one JSON object and at most one tool call whose arguments fit "
                "the tool's parameters."
            )
        return notes

    # -- the plan -------------------------------------------------------------------------------

    def _plan(self) -> None:
        """Agents without a fixed plan ask the model for one; the plan is committed as steps."""
        budgets.check_budgets(self.task)
        steps = planning.plan_propose(agent=self.agent, task=self.task, beat=self.beat)
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
