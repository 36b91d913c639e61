"""What the model proposes and what becomes of it: a plan for an agent without a fixed one
(`plan_propose`), and a step's proposal path: the model call, the proposal it returns, the checks
on it (arguments fit the tool, no planning loop, confidence), its route, and the commit of its
outcome with the model result: a `pending` ledger row, or a gate that parks the task; and, for a
step whose recorded proposal's call failed, its row re-issued with the same key (`reopen_call`).

Functions over the run's state (`runstate.RunState`), called by the runner's step loop; none of
them calls the model or a tool inside a transaction (each call is made between commits).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.db.models import F

from agentops.engine import budgets, excerpts, gates, routing, stops, summaries
from agentops.engine import context as ctxbuild
from agentops.engine.checkpoints import snapshot_write
from agentops.engine.costs import token_cost
from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import FailureKind, ModelFailure, UnknownTool
from agentops.engine.jsonvalues import Encoded, redacted
from agentops.engine.leases import Heartbeat
from agentops.engine.ledger import arguments_encoded, idempotency_key
from agentops.engine.model import ModelRequest, ModelResponse, get_model_adapter
from agentops.engine.registry import (
    Agent,
    Tool,
    get_tool,
    source_of,
    step_sources,
    tools_offered,
)
from agentops.engine.runstate import Routed, RunState
from agentops.engine.transitions import Commit, EventSpec, fenced_commit, fenced_write
from agentops.models import Step, Task, ToolCall
from agentops.plumbing import prometheus, tracing
from agentops.states import LedgerStatus, Phase
from policies.engine import Route


def plan_propose(*, agent: Agent, task: Task, beat: Heartbeat) -> list[Step]:
    """Ask the model for a plan (agents without a fixed plan); its steps, not yet saved (the
    runner commits them). The plan is made with the tools of every source that answers."""
    with beat.call():  # listing an MCP server's tools may start it
        offer = tools_offered(agent, agent.mcp_servers)
    stop = offer.stop_for(None)
    if stop is not None:
        raise stop
    tools = [get_tool(name).schema() for name in offer.names]
    request = ModelRequest(
        agent=agent.name,
        task_id=task.pk,
        step=-1,
        step_title="plan",
        attempt=task.claims,
        task_input=task.input,
        planning=True,
        messages=ctxbuild.build_messages(agent=agent, task=task, steps=[], current=None),
        tools=tools,
    )
    adapter = get_model_adapter(agent)
    with beat.call(), tracing.model_span(adapter.model, adapter.name) as span:
        response = adapter.complete(request)
        tracing.usage_record(span, response.usage)
        if not response.plan:
            raise ModelFailure("the model returned no plan", kind=FailureKind.OUTPUT_INVALID)
    return [
        Step(task=task, ordinal=i, title=str(p["title"])[:200], spec={"tool": p.get("tool")})
        for i, p in enumerate(response.plan)
    ]


def ask_model(run: RunState, step: Step) -> ModelResponse:
    """The model's response for `step`, asked with the run's prompt (budgets checked first),
    redacted before anything reads it."""
    budgets.check_budgets(run.task, worked=lambda: _worked_seconds(run))
    planned = (step.spec or {}).get("tool")
    sources = step_sources(run.agent, planned)
    # Listing an MCP server's tools may start it: an external call. Python tools are not.
    with run.beat.call() if sources else nullcontext():
        run.offer = tools_offered(run.agent, sources)
    stop = run.offer.stop_for(planned)
    if stop is not None:
        raise stop  # the step needs a server that failed: its own words, before any model call
    tools = [get_tool(name).schema() for name in run.offer.names]
    # A prompt that cut a result short offers the engine's own tool to read on (`excerpts`).
    reading = excerpts.Reading(run.steps) if run.reads_offered else None
    if reading is not None:
        tools.append(excerpts.READ_TOOL_SCHEMA)
    request = ModelRequest(
        agent=run.agent.name,
        task_id=run.task.pk,
        step=step.ordinal,
        step_title=step.title,
        step_tool=planned,
        instruction=str((step.spec or {}).get("instruction") or ""),
        attempt=step.attempts,
        messages=run.messages,
        tools=tools,
        task_input=run.task.input,
        prompt_estimate=run.prompt_estimate,
    )
    # The model's own summary of the steps the prompt summarizes by rule, when one is due
    # (recorded with this step's model result; it never fails the step).
    run.summary = summaries.summary_write(run, step)
    if run.summary is not None:
        safe_point(run, step)  # the summary took a model call's time: a stop made since holds
    adapter = get_model_adapter(run.agent)
    while True:
        with (
            run.beat.call(),
            prometheus.timed("model"),
            tracing.model_span(adapter.model, adapter.name) as span,
        ):
            response = adapter.complete(request)
            tracing.usage_record(span, response.usage)
        read = excerpts.Reading.read_call(response) if reading is not None else None
        if reading is None or read is None:
            break
        request = reading.answered(request, response, read)
        safe_point(run, step)  # each read's answer goes back to the model in a call of its own
    # Recorded next to the provider's count, so later prompts calibrate the estimate.
    record = response.as_record()
    record["usage"] = {**response.usage, "prompt_estimate": run.prompt_estimate}
    if reading is not None and reading.entries:
        record["usage"] = reading.total_usage(response, request.prompt_estimate or 0)
    # Model output is untrusted: a leaked credential must not reach the database (nor run).
    # What the database cannot store failed in the adapter (`model.response_from`).
    answer = ModelResponse.from_record(redacted(record))
    return replace(answer, reads=reading.entries) if reading is not None else answer


def _worked_seconds(run: RunState) -> float:
    """`budgets.worked_seconds`, read from the event log once per claim, then advanced by
    the run's own clock: while it holds the lease, the task is running."""
    if run.worked_at is None:
        run.worked_at = (budgets.worked_seconds(run.task.pk), time.monotonic())
    base, since = run.worked_at
    return base + time.monotonic() - since


def model_result(
    run: RunState, step: Step, response: ModelResponse
) -> tuple[EventSpec, dict[str, Any], Any]:
    """The model_result event, the task's usage increments and the record to store (offload
    it inside the caller's transaction, so an artifact row commits with its pointer)."""
    record = response.as_record()
    usage = response.usage
    tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    cost = token_cost(tokens)
    calls = response.tool_calls
    payload: dict[str, Any] = {
        "usage": usage,
        "confidence": response.confidence,
        "tool": calls[0]["name"] if calls else None,
        "phase": Phase.MODEL_RESULT,
    }
    if response.reads:
        # What the model read on before it proposed (`excerpts.read_answer`'s entries).
        payload["reads"] = response.reads
    if run.summary is not None:
        # The model-written summary asked before this reply: its tokens are the task's too.
        payload["summary"] = run.summary
        tokens += int(run.summary.get("tokens") or 0)
        cost = token_cost(tokens)
        run.summary = None
    event = EventSpec("agentops.step.model_result", step=step.ordinal, payload=payload)
    run.task.tokens_used += tokens
    run.task.cost_used += cost
    usage_fields = {
        "tokens_used": F("tokens_used") + tokens,
        "cost_used": F("cost_used") + cost,
    }
    return event, usage_fields, record


def route(
    run: RunState, step: Step, response: ModelResponse, tool: Tool, *, record: bool
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
        _check_proposal(run, step, response, tool, arguments, known)
    verdict = routing.verdict_for(
        task=run.task,
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
        event, usage_fields, routed.response_record = model_result(run, step, response)
        routed.events.append(event)
        routed.fields.update(usage_fields)
        routed.proposal_runs = arguments is response.tool_calls[0]["arguments"]
    # The safe point before the tool call: nothing of it is written yet.
    safe_point(run, step, tool=tool, routed=routed)
    if verdict.route == Route.GATE:
        if not routing.approved(step, routed.digest, verdict):
            _park_at_gate(run, routed)
            tracing.event_add("agentops.gate.opened", {"agentops.policy.rule": verdict.rule})
            return None
        tracing.event_add("agentops.gate.decided", {"agentops.policy.rule": verdict.rule})
    run.proposals.setdefault((tool.name, routed.digest), set()).add(step.pk)
    if tool.read_only:
        return _defer_call(run, routed)
    call = _open_call(run, routed)
    if record:
        crashpoint("after_model_result", step=step.ordinal)
    crashpoint("after_pending", step=step.ordinal)
    _opened(run, call, routed)
    return call


def safe_point(
    run: RunState, step: Step | None, *, tool: Tool | None = None, routed: Routed | None = None
) -> None:
    """A safe point of the fleet's stop button (`stops`): after the task's last commit, before
    a model call (no `tool`) or before a tool call (`tool`, with the `routed` proposal whose
    model result is not committed yet, if new). A revoked lease raises LeaseLost; a stop in
    force that covers the step pauses the task here (the new model result kept, so the model
    is not asked again on resume) and raises StopReached. A stop lifted between the check and
    the pause pauses nothing: the step goes on."""
    try:
        stops.safe_point_check(
            run.lease, agent=run.agent.name, tool=tool.name if tool is not None else None
        )
    except stops.StopReached as reached:
        if _halt(run, step, reached.stop_id, tool=tool, routed=routed):
            raise


def _halt(
    run: RunState, step: Step | None, stop_id: int, *, tool: Tool | None, routed: Routed | None
) -> bool:
    """Pause the task for stop `stop_id`; False (nothing written) when it was lifted since."""
    at = Phase.BEFORE_TOOL_CALL if tool is not None else Phase.BEFORE_MODEL_CALL
    payload: dict[str, Any] = {"stop": stop_id, "phase": at}
    if tool is not None:
        payload["tool"] = tool.name
    events = [*(routed.events if routed is not None else [])]
    events.append(
        EventSpec(
            "agentops.step.halted", step=step.ordinal if step is not None else None, payload=payload
        )
    )
    record = routed.response_record if routed is not None else None
    fields = {k: v for k, v in (routed.fields if routed is not None else {}).items()}
    fields.pop("phase", None)
    if record is not None:
        fields["phase"] = Phase.MODEL_RESULT
    with transaction.atomic():
        # The stop's row first, as its lift takes it before the tasks: a lift either commits
        # before (the stop is then lifted, and nothing is paused) or waits for this pause and
        # resumes the task with the others.
        stop = stops.stop_in_force_locked(stop_id)
        if stop is None:
            return False
        with fenced_commit(run.lease, events, **fields) as commit:
            if step is not None:
                # A halt is no failed try: the attempt its start counted is given back, so
                # that stops and resumes never bring a step to its cap.
                given_back = {"attempts": max(step.attempts - 1, 0)}
                if record is not None:
                    _store_step(run, commit, step, given_back, record)
                else:
                    commit.step_update(step, **given_back)
        stops.task_halt(task_id=run.task.pk, stop=stop, at=at, tool=tool.name if tool else None)
    return True


def _opened(run: RunState, call: ToolCall, routed: Routed) -> None:
    run.fresh_calls.add(call.pk)
    # The arguments just stored (perhaps as an artifact) are run from memory, not read back.
    run.call_arguments[call.pk] = routed.arguments
    run.calls[call.pk] = call


def _defer_call(run: RunState, routed: Routed) -> ToolCall:
    """A read-only call, routed but not committed: it runs first, and the step's one commit
    records it `succeeded` with the model result, the routing and the step's completion
    (`stepcommits.complete`). Nothing is at stake before that commit: a crash there costs
    the model call and the read, which the next holder makes again."""
    step, tool = routed.step, routed.tool
    routed.key = _call_key(run, routed)
    routed.call = ToolCall(
        task=run.task,
        step=step,
        tool=tool.name,
        side_effect=tool.side_effect,
        args=routed.arguments,
        args_digest=routed.digest,
        idempotency_key=routed.key,
    )
    run.deferred = routed
    return routed.call


def open_deferred(run: RunState, routed: Routed) -> ToolCall:
    """Commit the `pending` row of a read-only call that did not succeed (as `_open_call`
    does before any other call runs), so that its failure is recorded on it."""
    call = _open_call(run, routed)
    _opened(run, call, routed)
    return call


def _call_key(run: RunState, routed: Routed) -> str:
    return idempotency_key(
        task_id=run.task.pk,
        step_id=routed.step.pk,
        tool=routed.tool.name,
        args_digest=routed.digest,
    )


def _check_proposal(
    run: RunState,
    step: Step,
    response: ModelResponse,
    tool: Tool,
    arguments: dict[str, Any],
    known: Encoded,
) -> None:
    """Checks on a new proposal, before it is routed: its arguments fit the tool, it is not
    a planning loop, and the model's confidence has not collapsed."""
    tool.check_arguments(arguments, text=known.data if known.exact else None)
    budgets.check_loop(run.proposals, step, tool, arguments, digest=known.sha256)
    budgets.check_confidence(run.agent, run.steps, step, response)


def _park_at_gate(run: RunState, routed: Routed) -> None:
    """Commit the gate, the routing (and model result) and the `await_approval` transition
    together, with a snapshot: the job ends and no worker waits for the decision."""
    step = routed.step
    payload = routing.routed_payload(tool=routed.tool, verdict=routed.verdict, digest=routed.digest)
    events = [
        *routed.events,
        EventSpec("agentops.step.gated", step=step.ordinal, payload=payload),
    ]
    with fenced_commit(run.lease, events, transition="await_approval", **routed.fields) as commit:
        _store_step(run, commit, step, routed.step_routing(), routed.response_record)
        # The gate's rows commit with the step's.
        commit.in_transaction()
        gates.gate_open(
            task=run.task,
            step=step,
            tool=routed.tool,
            arguments=routed.arguments,
            args_digest=routed.digest,
            verdict=routed.verdict,
            edited=routed.edited,
        )
        snapshot_write(task_id=run.task.pk, seq=commit.seq)


def _open_call(run: RunState, routed: Routed) -> ToolCall:
    """Commit the `pending` ledger row (and an audit item when the call is audited) with the
    routing and the model result, before the tool runs."""
    step, tool, verdict = routed.step, routed.tool, routed.verdict
    key = _call_key(run, routed)
    payload = routing.routed_payload(tool=tool, verdict=verdict, digest=routed.digest)
    event = EventSpec(
        "agentops.ledger.pending",
        step=step.ordinal,
        payload={**payload, "key": key},
        fold={"ledger": {key: LedgerStatus.PENDING}},
    )
    with fenced_commit(run.lease, [*routed.events, event], **routed.fields) as commit:
        args, record = routed.arguments_stored(commit, task_id=run.task.pk)
        _store_step(run, commit, step, routed.step_routing(), record)
        call = commit.call_create(
            task=run.task,
            step=step,
            tool=tool.name,
            side_effect=tool.side_effect,
            args=args,
            args_digest=routed.digest,
            idempotency_key=key,
        )
        if routing.audited(verdict, step):
            # The audit item names the new row: the same statement inserts it.
            item = gates.audit_item_of(
                task=run.task,
                step=step,
                call=call,
                verdict=verdict,
                sampled=verdict.route != Route.AUDIT,
            )
            commit.audit_insert(item, call)
    return call


def _store_step(
    run: RunState,
    commit: Commit,
    step: Step,
    fields: dict[str, Any],
    response_record: dict[str, Any] | None,
) -> None:
    """Write the routing fields (and a new model response) on the step, in `commit`."""
    if response_record is not None:
        fields["model_response"] = commit.offloaded(
            response_record, path="step.model_response", task_id=run.task.pk
        )
        step.model_response = fields["model_response"]
    commit.step_update(step, **fields)


def live_call(step: Step) -> ToolCall | None:
    """The step's ledger row that still counts (failed tries are history)."""
    return (
        ToolCall.objects.filter(step=step, compensation_of__isnull=True)
        .exclude(status=LedgerStatus.FAILED)
        .order_by("-id")
        .first()
    )


def reopen_call(run: RunState, step: Step, tool: Tool) -> ToolCall:
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
        fenced_write(run.lease, [event], phase=Phase.BEFORE_TOOL_CALL)
        call = ToolCall.objects.create(
            task=run.task,
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
    run.fresh_calls.add(call.pk)
    run.calls[call.pk] = call
    return call


def proposed_tool(run: RunState, name: str) -> Tool:
    """The tool the model proposed, if the run's agent has it; output_invalid otherwise. A tool
    of a source the step's offer could not list stops the step with that source's failure; one
    of a source the step did not list (the model left its plan's tool) lists that source now."""
    source = source_of(run.agent, name)
    if source is not None:
        offer = run.offer
        failure = offer.unavailable.get(source.name) if offer is not None else None
        if failure is not None:
            raise failure
        if offer is not None and source.name in offer.listed:
            known = name in offer.names
        else:
            with run.beat.call():
                known = name in source.tool_names(refresh=True)
    else:
        known = name in run.agent.tools
    if not known:
        raise ModelFailure(
            f"the model proposed tool {name!r}, which agent {run.agent.name} does not have",
            kind=FailureKind.OUTPUT_INVALID,
        )
    try:
        return get_tool(name)
    except UnknownTool as exc:
        raise ModelFailure(str(exc), kind=FailureKind.OUTPUT_INVALID) from None
