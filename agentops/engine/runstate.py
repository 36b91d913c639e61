"""What a task run holds while it advances a task (`RunState`) and what running one step
produced (`StepResult`, with the proposal it `Routed`).

The run is one object: `runner.TaskRun` is a `RunState` with the step loop, and the loop's
phases are functions over it in the modules of their sub-domain (`proposals`: the model call and
the proposal's route; `stepcommits`: each phase's commit). Only the loop and those functions
change it; it is session state, rebuilt from the rows on every claim and never persisted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from agentops.engine.checkpoints import OutputsDigest
from agentops.engine.errors import StepFailure
from agentops.engine.jsonvalues import Encoded, is_pointer
from agentops.engine.leases import Heartbeat
from agentops.engine.ledger import Outcome
from agentops.engine.model import record_pointing_at
from agentops.engine.promptcache import PromptCache
from agentops.engine.registry import Agent, Tool, ToolOffer
from agentops.engine.routing import Verdict, step_routing
from agentops.engine.transitions import Commit, EventSpec, Lease
from agentops.engine.versions import AgentVersion
from agentops.models import Step, Task, ToolCall
from agentops.states import Phase


@dataclass
class Routed:
    """A proposed call with its verdict, and the task writes (the model result, if new) that
    commit with it: a gate, or a `pending` ledger row; or, for a read-only call, the step's one
    commit after the call ran (`call` is then the row to insert, `key` its key)."""

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
    # The arguments to run are the model's proposal itself, just received (no person's
    # approval replaced them): the record can point at their artifact, and they passed
    # `model.checked_reply` with the reply (redaction only replaces strings).
    proposal_runs: bool = False
    key: str = ""
    # A read-only call not recorded yet (no pk): it runs first, the step's commit records it.
    call: ToolCall | None = None

    def step_routing(self) -> dict[str, Any]:
        """What the step records of its routed proposal: the verdict, and what the tool adds
        (an MCP tool's schema digest and definition)."""
        return {**step_routing(self.verdict), **self.tool.step_fields(self.step.spec or {})}

    def arguments_stored(
        self, commit: Commit, *, task_id: int
    ) -> tuple[Any, dict[str, Any] | None]:
        """The arguments as the commit stores them (inline or an artifact pointer), and the model
        response record to store with them: when the arguments are the proposal itself, it is
        stored once, the record pointing at the row's artifact."""
        args = commit.offloaded(
            self.arguments,
            path="tool_call.args",
            task_id=task_id,
            known=self.known,
            checked=self.proposal_runs,
        )
        record = self.response_record
        if record is not None and self.proposal_runs and is_pointer(args):
            record = record_pointing_at(record, args)
        return args, record


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
    # A stop in force paused the task at the step's safe point (`stops`): the job ends.
    halted: bool = False
    # What the step's one commit records besides its completion (no commit came before it):
    # a read-only call that ran, with its model result and routing; or a new text reply's
    # model result (its event, the task's usage increments and the record to store).
    unrecorded_call: Routed | None = None
    unrecorded_reply: tuple[EventSpec, dict[str, Any], dict[str, Any]] | None = None


@dataclass
class RunState:
    """The state of one claim's run: the lease, the rows as the run last wrote them, and what
    this slice's prompts made. `TaskRun` adds the step loop; `proposals` and `stepcommits`
    read and update it."""

    lease: Lease
    http: httpx.Client
    beat: Heartbeat
    # The row as the claim left it.
    task: Task
    agent: Agent = field(init=False)
    # The agent's declaration and the model's name, recorded on every step this run starts.
    version: AgentVersion = field(init=False)
    model_name: str = field(init=False)
    steps: list[Step] = field(init=False)
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The estimate of `messages` made while building them (recorded next to reported usage).
    prompt_estimate: int = 0
    # `messages` cut a result short: the model is offered the `read_result` tool (`excerpts`).
    reads_offered: bool = False
    # How many earlier steps `messages` summarize by rule; the steps the task's latest
    # model-written summary covered (None: not read yet this claim); the record of the one
    # written for the current step, committed with its model result (`engine.summaries`).
    summarized: int = 0
    summary_through: int | None = None
    summary: dict[str, Any] | None = None
    resumed_at: str | None = None
    fresh_calls: set[int] = field(default_factory=set)
    # (tool, args digest) -> the steps that proposed it: loop detection without a query per step.
    proposals: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    # Tokens of completed steps that this resume does not spend again (recorded with the next
    # step's start).
    tokens_saved: int = 0
    # The task's ledger rows by id, as this run last wrote them (the in-memory snapshot's).
    calls: dict[int, ToolCall] = field(default_factory=dict)
    # The step's read-only call routed but not recorded yet (`proposals.route`).
    deferred: Routed | None = None
    # What the step's model call was offered (`proposals.ask_model`): its tools, and the
    # sources that could not be listed for it.
    offer: ToolOffer | None = None
    call_arguments: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Worked seconds at the first budget check of this claim, and the monotonic clock then.
    worked_at: tuple[float, float] | None = None
    # What this slice's prompts made, for its next prompts (bounded by bytes; see `advance`).
    prompts: PromptCache = field(default_factory=PromptCache)
    # The digest of the completed steps' outputs, carried from one snapshot to the next.
    outputs_digest: OutputsDigest = field(default_factory=OutputsDigest)
