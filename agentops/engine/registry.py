"""Agents and tools, declared in Python and registered by name.

A tool is a typed function `fn(call: ToolContext, **arguments) -> dict` plus what the ledger and the
policy need to know about it. Its contract comes from pydantic: the keyword-only parameters' type
hints (with `Annotated` constraints and nested models) give the JSON schema the model sees (with its
`required` list) and validate the model's arguments with error paths; an optional result type
(the `result=` argument or a pydantic/TypedDict return annotation) validates what it returns.
Also: its side-effect class, the systems it touches, whether the remote honours idempotency keys,
and optional `probe` and `compensate` hooks. An agent is a name, a system
prompt, the tools it may use and a plan (a fixed list of steps, or None when the model plans).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx
import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from agentops.engine.errors import (
    FailureKind,
    ModelFailure,
    OrchestrationFailure,
    StepFailure,
    ToolFailure,
    UnknownAgent,
    UnknownTool,
)

if TYPE_CHECKING:
    from agentops.models import Step

logger = logging.getLogger(__name__)

# What a tool does to the world, the class policies route on: a type for the tools' authors (a
# misspelt class fails mypy) and the tuple the registry checks at run time. `destructive`: a
# write that may delete or overwrite (an MCP tool's `destructiveHint`), apart from `write` so a
# policy can gate it while letting other writes through.
SideEffect = Literal["read", "write", "destructive", "notify", "financial"]
SIDE_EFFECT_CLASSES: tuple[str, ...] = typing.get_args(SideEffect)
# The class of a tool that changes nothing anywhere (the ledger's migration 0019 names it too).
READ_ONLY = "read"
# The engine's own tool (`engine.excerpts`): offered to a prompt that cut a result short, answered
# by the engine inside the step. No tool an agent registers may take its name.
READ_RESULT_TOOL = "read_result"


# Ask the remote whether the effect with this key happened (None: it did not).
Probe = Callable[["ToolContext"], dict[str, Any] | None]
# (original arguments, recorded result) -> the compensating tool's arguments.
CompensationArgs = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
# (arguments, latest result per tool name) -> (passed, explanation).
Check = Callable[..., tuple[bool, str]]


@dataclass
class ToolContext:
    """What a tool gets besides its arguments. Session state: rebuilt on every resume."""

    idempotency_key: str
    task_id: int
    step: int
    http: httpx.Client
    base_url: str
    timeout: float
    # The OAuth scopes this call carries: the agent's declared scopes and the grants in force
    # for the task (None: the agent declares none and calls with the unrestricted key).
    scopes: tuple[str, ...] | None = None
    # A person's answer to the question this call asks (the built-in `ask_human` tool).
    answer: dict[str, Any] | None = None


@dataclass
class Tool:
    name: str
    fn: Callable[..., dict[str, Any]]
    side_effect: str
    systems: tuple[str, ...] = ()
    idempotent_remote: bool = False
    description: str = ""
    probe_fn: Probe | None = None
    compensate_with: str | None = None
    compensation_args: CompensationArgs | None = None
    # The tool's own retry policy: at most this many attempts of a step that calls it (the
    # task's cap applies too: the lower wins, `retries.attempt_cap`), and the backoff base in
    # seconds (None: the global setting).
    max_attempts: int | None = None
    backoff_base: float | None = None
    # The deadline of each HTTP request the tool (and its probe) makes, in seconds (None:
    # AGENTOPS_TOOL_TIMEOUT_SECONDS). The runner hands it to the tool as `ToolContext.timeout`.
    timeout: float | None = None
    # Evidence for a reviewer: checks of the proposed arguments against earlier tool results of
    # the task, shown at the top of a gate (label, fn(arguments, results by tool) -> (ok, why)).
    checks: list[tuple[str, Check]] = field(default_factory=list)
    # The declared shape of the tool's result (pydantic model, TypedDict, ...); None: any object.
    result_type: Any = None
    # The digest of the tool's schema as its server lists it (MCP tools; "" for Python tools,
    # whose schema changes only with a deploy).
    schema_digest: str = ""

    def timeout_or(self, default: float) -> float:
        """The tool's own deadline, or `default` (the setting) when it declares none."""
        return default if self.timeout is None else self.timeout

    @property
    def repeat_safe(self) -> str:
        """The ledger's words for why calling again after a lost outcome makes no second
        effect (asked of a tool that reads, or whose remote honours the idempotency key)."""
        return (
            "the tool only reads: asked again" if self.read_only else "remote deduplicates by key"
        )

    @property
    def read_only(self) -> bool:
        """It changes nothing anywhere, so running it again is harmless: the runner records its
        call once, after it ran, with the step (docs/architecture.md, "One commit where no
        effect is at stake"); every other call has its `pending` row committed first."""
        return self.side_effect == READ_ONLY

    def parameters(self) -> dict[str, type]:
        """Keyword-only parameters of the tool function and their annotated types."""
        hints = typing.get_type_hints(self.fn)
        return {
            name: hints.get(name, object)
            for name, param in inspect.signature(self.fn).parameters.items()
            if param.kind is inspect.Parameter.KEYWORD_ONLY
        }

    @functools.cached_property
    def arguments_model(self) -> type[BaseModel]:
        """The pydantic model of the tool's keyword-only parameters (extra arguments forbidden,
        no type coercion)."""
        hints = typing.get_type_hints(self.fn, include_extras=True)
        fields: dict[str, Any] = {}
        for name, param in inspect.signature(self.fn).parameters.items():
            if param.kind is not inspect.Parameter.KEYWORD_ONLY:
                continue
            annotation = hints.get(name, Any)
            fields[name] = (annotation, ... if param.default is param.empty else param.default)
        return pydantic.create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid", strict=True),
            **fields,
        )

    def check_arguments(self, arguments: dict[str, Any], *, text: bytes | None = None) -> None:
        """Raise ModelFailure(output_invalid) if the model's arguments break the contract; the
        message names each offending path (`arguments.address.city: ...`). `text`: the
        arguments' JSON when the caller has it already."""
        try:
            self.arguments_model.model_validate_json(
                json.dumps(arguments) if text is None else text
            )
        except ValidationError as exc:
            raise ModelFailure(
                f"tool {self.name}: {contract_errors(exc, 'arguments')}",
                kind=FailureKind.OUTPUT_INVALID,
            ) from None

    @functools.cached_property
    def result_adapter(self) -> TypeAdapter[Any] | None:
        """The validator of the declared result type (None: any object), built once: at
        registration, so a type pydantic cannot validate is refused there, not at the first
        call in a worker."""
        return None if self.result_type is None else TypeAdapter(self.result_type)

    def check_result(self, result: Any, *, text: bytes | None = None) -> None:
        """Raise ToolFailure(schema_mismatch) if the result breaks the declared result type.
        `text`: the result's JSON when the caller has it already."""
        if self.result_adapter is None:
            return
        try:
            self.result_adapter.validate_json(json.dumps(result) if text is None else text)
        except ValidationError as exc:
            raise ToolFailure(
                f"{self.name} returned a result that breaks its declared schema: "
                f"{contract_errors(exc, 'result')}",
                kind=FailureKind.SCHEMA_MISMATCH,
                retryable=False,
            ) from None

    def probe(self, fn: Probe) -> Probe:
        """Decorator: ask the remote whether the effect with this key happened (None: not)."""
        self.probe_fn = fn
        return fn

    def compensation(self, fn: CompensationArgs) -> CompensationArgs:
        """Decorator: map (original arguments, recorded result) to the compensating tool's args."""
        self.compensation_args = fn
        return fn

    def check(self, label: str) -> Callable[[Check], Check]:
        """Decorator: a check of the arguments against earlier results, `fn(arguments, results)`
        returning (passed, explanation); `results` maps tool names to their latest result."""

        def register(fn: Check) -> Check:
            self.checks.append((label, fn))
            return fn

        return register

    def step_fields(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Fields a step proposing this tool records besides its routing (`spec` is the step's
        current spec): none for a Python tool; an MCP tool records its schema digest."""
        return {}

    def schema(self) -> dict[str, Any]:
        """The function declaration the model sees: name, description, JSON-schema parameters.

        Built once per tool (pydantic's schema generation costs about half a millisecond, on
        every model call otherwise); the dict is shared, so callers do not mutate it."""
        return self._schema

    @functools.cached_property
    def _schema(self) -> dict[str, Any]:
        parameters = self.arguments_model.model_json_schema()
        parameters.pop("title", None)
        return {"name": self.name, "description": self.description, "parameters": parameters}


def contract_errors(exc: ValidationError, root: str) -> str:
    """pydantic's errors in this project's path style: for arguments, unknown and missing names
    first (as before), then `root.a.b[2]: message` for each other error."""
    errors = exc.errors()
    parts = []
    if root == "arguments":
        top = [
            e for e in errors if len(e["loc"]) == 1 and e["type"] in ("extra_forbidden", "missing")
        ]
        unknown = sorted(str(e["loc"][0]) for e in top if e["type"] == "extra_forbidden")
        missing = sorted(str(e["loc"][0]) for e in top if e["type"] == "missing")
        if top:
            parts.append(f"unexpected arguments {unknown}, missing {missing}")
        errors = [e for e in errors if e not in top]
    parts.extend(f"{json_path(root, e['loc'])}: {e['msg']}" for e in errors)
    return "; ".join(parts)


def json_path(root: str, loc: tuple[int | str, ...]) -> str:
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


@dataclass(frozen=True)
class PlanStep:
    title: str
    tool: str | None = None
    depends_on: tuple[int, ...] = ()
    # The name of a registered fan-out (agentops.engine.children): the step spawns child tasks.
    fan_out: str | None = None
    # The name of a registered agent: the step hands the task's workflow state over to it.
    handoff: str | None = None
    # What the model is told to do in this step, beyond its title ("" : the title says it).
    instruction: str = ""


@dataclass(frozen=True)
class Need:
    """A setting an agent cannot work without: the environment `variable` and what it is for
    (`purpose`, shown to whoever must set it: "the base URL of the parcel service"). An agent
    whose needs are not all set is not offered and not started (`agentops.engine.needs`)."""

    variable: str
    purpose: str

    def __post_init__(self) -> None:
        if not self.variable or not self.variable.replace("_", "").isalnum():
            raise ValueError(
                f"a need names an environment variable (letters, digits, _), not {self.variable!r}"
            )
        if not self.purpose.strip():
            raise ValueError(f"need {self.variable}: say what it is for (purpose=)")


@dataclass
class Agent:
    name: str
    system_prompt: str
    tools: list[str]
    # A fixed plan, a function of the task input that returns one, or None when the model
    # produces the plan in its first call.
    plan: list[PlanStep] | Callable[[dict[str, Any]], list[PlanStep]] | None
    # The scripted model's behaviour for this agent (see agentops.engine.model).
    script: Callable[..., dict[str, Any]] | None = None
    description: str = ""
    # Agents marked hidden are not offered in the "start a task" form (benchmarks, tests).
    hidden: bool = False
    # The model adapter ("scripted", "openai") and model name; None: the settings' default.
    adapter: str | None = None
    model: str | None = None
    # The model's context window in tokens (None: AGENTOPS_CONTEXT_WINDOW_TOKENS).
    context_window: int | None = None
    # Below this confidence a step counts towards a confidence collapse (None: the setting).
    confidence_floor: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Input fields a person may change on a running or paused task (`task_modify`).
    editable_input: tuple[str, ...] = ()
    # The OAuth scopes of the agent's credential (`service:operation`); None: it calls with the
    # deployment's unrestricted key. A person may grant a missing one (`engine.grants`).
    scopes: tuple[str, ...] | None = None
    # MCP servers the agent takes tools from (`agentops.engine.mcptools.McpServer`), besides
    # `tools`: their tools are listed by the worker, for the steps that need them
    # (`step_sources`).
    mcp_servers: tuple[ToolSource, ...] = ()
    # Other ways to reach the goal, by name: plans a person may switch a stopped task to
    # (`engine.repair`). The first plan is `plan`, named DEFAULT_STRATEGY.
    strategies: dict[str, list[PlanStep]] = field(default_factory=dict)
    # The settings it cannot work without (the base URL of its service, a credential): unset,
    # the agent is neither offered nor started (`engine.needs`; its stdio MCP servers' programs
    # count too).
    needs: tuple[Need, ...] = ()


class ToolSource(Protocol):
    """Tools that are not Python functions of this deploy: an MCP server
    (`agentops.engine.mcptools.McpServer`). Its tools are named `<name>__<tool>`."""

    @property
    def name(self) -> str: ...

    def tool_names(self, *, refresh: bool = False) -> list[str]:
        """The source's tools (listed from the source when `refresh` or never listed yet)."""
        ...

    def recorded(self, name: str) -> Tool | None:
        """The tool as a recorded step saw it (no request to the source), or None."""
        ...

    def recorded_names(self) -> list[str]:
        """The names of the source's tools that steps recorded (no request to the source)."""
        ...


_TOOLS: dict[str, Tool] = {}
# What the policy engine knows of each tool, kept beside _TOOLS (`tool_entries`).
_TOOL_ENTRIES: dict[str, tuple[str, tuple[str, ...]]] = {}
_AGENTS: dict[str, Agent] = {}
# Tool sources by name: a tool `<source>__<tool>` missing from _TOOLS is looked up there.
_SOURCES: dict[str, ToolSource] = {}


def tool(
    *,
    side_effect: SideEffect,
    systems: tuple[str, ...] = (),
    idempotent_remote: bool = False,
    name: str | None = None,
    compensate_with: str | None = None,
    max_attempts: int | None = None,
    backoff_base: float | None = None,
    timeout: float | None = None,
    result: Any = None,
) -> Callable[[Callable[..., dict[str, Any]]], Tool]:
    """Register a function as a tool. `max_attempts`, `backoff_base` and `timeout` are its own
    retry policy and deadline (None: the task's cap and the settings)."""
    if side_effect not in SIDE_EFFECT_CLASSES:
        raise ValueError(f"side_effect must be one of {SIDE_EFFECT_CLASSES}")
    if max_attempts is not None and max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
    if backoff_base is not None and backoff_base < 0:
        raise ValueError(f"backoff_base must be zero or more seconds, not {backoff_base:g}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be more than zero seconds, not {timeout:g}")

    def register(fn: Callable[..., dict[str, Any]]) -> Tool:
        if (name or fn.__name__) == READ_RESULT_TOOL:
            raise ValueError(f"{READ_RESULT_TOOL!r} is the engine's own tool: name yours otherwise")
        spec = Tool(
            name=name or fn.__name__,
            fn=fn,
            side_effect=side_effect,
            systems=tuple(systems),
            idempotent_remote=idempotent_remote,
            description=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "",
            compensate_with=compensate_with,
            max_attempts=max_attempts,
            backoff_base=backoff_base,
            timeout=timeout,
            result_type=result if result is not None else _declared_result(fn),
        )
        spec.arguments_model  # noqa: B018 - build (and check) the contract at registration
        spec.result_adapter  # noqa: B018 - and the result's
        _TOOLS[spec.name] = spec
        _TOOL_ENTRIES[spec.name] = (spec.side_effect, tuple(spec.systems))
        return spec

    return register


def _declared_result(fn: Callable[..., Any]) -> Any:
    """A return annotation that declares a shape (a pydantic model or a TypedDict), else None."""
    returned = typing.get_type_hints(fn).get("return")
    if isinstance(returned, type) and (
        issubclass(returned, BaseModel) or typing.is_typeddict(returned)
    ):
        return returned
    return None


def plan_for(agent: Agent, task_input: dict[str, Any]) -> list[PlanStep]:
    """The agent's fixed plan for this input ([] when the model will plan)."""
    if agent.plan is None:
        return []
    return list(agent.plan(task_input) if callable(agent.plan) else agent.plan)


def step_spec(step: PlanStep) -> dict[str, Any]:
    """What a plan step stores in `Step.spec`: its tool, and a fan-out, a handoff or an
    instruction if it has one."""
    spec: dict[str, Any] = {"tool": step.tool}
    if step.fan_out:
        spec["fan_out"] = step.fan_out
    if step.handoff:
        spec["handoff"] = step.handoff
    if step.instruction:
        spec["instruction"] = step.instruction
    return spec


def is_fan_out(step: Step) -> bool:
    """The step starts child tasks (its spec names a fan-out) instead of calling a tool."""
    return bool((step.spec or {}).get("fan_out"))


def is_handoff(step: Step) -> bool:
    """The step hands the task over to another agent (its spec names one)."""
    return bool((step.spec or {}).get("handoff"))


# The name of an agent's own plan among its strategies.
DEFAULT_STRATEGY = "default"


def register_agent(agent: Agent) -> Agent:
    for tool_name in agent.tools:
        get_tool(tool_name)
    for need in agent.needs:
        if not isinstance(need, Need):
            raise TypeError(f"agent {agent.name}: needs= holds Need(...)s, not {need!r}")
    for source in agent.mcp_servers:
        known = _SOURCES.get(source.name)
        if known is not None and known != source:
            raise ValueError(f"tool source {source.name!r} is declared twice, differently")
        _SOURCES[source.name] = source
    if DEFAULT_STRATEGY in agent.strategies:
        raise ValueError(f"strategy name {DEFAULT_STRATEGY!r} is the agent's own plan")
    _AGENTS[agent.name] = agent
    return agent


def tool_add(spec: Tool) -> None:
    """Register (or replace) a tool that a source listed."""
    _TOOLS[spec.name] = spec
    _TOOL_ENTRIES[spec.name] = (spec.side_effect, tuple(spec.systems))


def source_of(agent: Agent, name: str) -> ToolSource | None:
    """The agent's source that tool `name` comes from (None: a Python tool, or not the agent's)."""
    if name in agent.tools:
        return None
    prefix, separator, _ = name.partition("__")
    return next((s for s in agent.mcp_servers if s.name == prefix), None) if separator else None


def step_sources(agent: Agent, tool: str | None) -> tuple[ToolSource, ...]:
    """The sources a step lists before its model call: the one of the tool its plan names (none
    for a Python tool), or every source of the agent when its plan names no tool and the model
    chooses. A source the step does not list is not started for it."""
    if tool is None:
        return agent.mcp_servers
    source = source_of(agent, tool)
    return () if source is None else (source,)


@dataclass(frozen=True)
class ToolOffer:
    """The tools one model call is offered: the agent's Python tools and the tools of the
    sources listed for it. A source that could not be listed leaves out only its own tools; its
    failure (the source's own words) is kept for a step that needs it."""

    names: tuple[str, ...]
    listed: frozenset[str]
    unavailable: Mapping[str, StepFailure]

    def stop_for(self, tool: str | None) -> StepFailure | None:
        """The failure a step stops with before its model call, or None: the source of the
        tool its plan names could not be listed, or nothing is left to offer but some source
        failed."""
        if not self.unavailable:
            return None
        needed = self.unavailable.get(tool.partition("__")[0]) if tool is not None else None
        if needed is not None:
            return needed
        if not self.names:
            return next(iter(self.unavailable.values()))
        return None


def tools_offered(agent: Agent, sources: tuple[ToolSource, ...]) -> ToolOffer:
    """List `sources` now, each on its own (an outbound call: made outside any transaction,
    with the lease's heartbeat armed), and offer their tools with the agent's Python tools."""
    names = list(agent.tools)
    listed: set[str] = set()
    unavailable: dict[str, StepFailure] = {}
    for source in sources:
        try:
            names.extend(source.tool_names(refresh=True))
        except ToolFailure as failure:
            logger.warning("tool source %s could not be listed: %s", source.name, failure)
            unavailable[source.name] = failure
        else:
            listed.add(source.name)
    return ToolOffer(names=tuple(names), listed=frozenset(listed), unavailable=unavailable)


def get_tool(name: str) -> Tool:
    try:
        return _TOOLS[name]
    except KeyError:
        pass
    source_name, separator, _ = name.partition("__")
    source = _SOURCES.get(source_name) if separator else None
    recorded = source.recorded(name) if source is not None else None
    if recorded is None:
        raise UnknownTool(name)
    return recorded


def registered_tool(name: str) -> Tool:
    """A tool a recorded step uses; a deploy that removed it stops the step, not the worker."""
    try:
        return get_tool(name)
    except UnknownTool as exc:
        raise OrchestrationFailure(
            f"{exc}: the tool of a recorded call is no longer registered",
            kind=FailureKind.UNKNOWN_TOOL,
        ) from None


def get_agent(name: str) -> Agent:
    try:
        return _AGENTS[name]
    except KeyError:
        raise UnknownAgent(name, sorted(_AGENTS)) from None


def agents() -> list[Agent]:
    return sorted(_AGENTS.values(), key=lambda a: a.name)


class _Entries(Mapping[str, tuple[str, tuple[str, ...]]]):
    """`{name: (side_effect, systems)}` of every registered tool, and of every tool of a source
    (an MCP server) that a step recorded, though this process never listed it: the web tier's
    policy editor knows them too. A lookup reads the registry (routing looks up one entry per
    proposed call); iterating (the editor's checks, cold) also asks the sources' records."""

    def __getitem__(self, name: str) -> tuple[str, tuple[str, ...]]:
        entry = _TOOL_ENTRIES.get(name)
        if entry is None and name.partition("__")[0] in _SOURCES:
            with contextlib.suppress(UnknownTool):
                get_tool(name)  # registers the recorded tool
            entry = _TOOL_ENTRIES.get(name)
        if entry is None:
            raise KeyError(name)
        return entry

    def __iter__(self) -> typing.Iterator[str]:
        names = dict.fromkeys(_TOOL_ENTRIES)
        for source in _SOURCES.values():
            names.update(dict.fromkeys(source.recorded_names()))
        return iter(list(names))

    def __len__(self) -> int:
        return sum(1 for _ in self)


_ENTRIES = _Entries()


def tool_entries() -> Mapping[str, tuple[str, tuple[str, ...]]]:
    """`{name: (side_effect, systems)}` of every known tool: a read-only view, not a copy."""
    return _ENTRIES


def tools() -> list[Tool]:
    return sorted(_TOOLS.values(), key=lambda t: t.name)
