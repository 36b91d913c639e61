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

import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import httpx
import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from agentops.engine.errors import (
    FailureKind,
    ModelFailure,
    OrchestrationFailure,
    ToolFailure,
    UnknownAgent,
    UnknownTool,
)

SIDE_EFFECT_CLASSES = ("read", "write", "notify", "financial")
# The class of a tool that changes nothing anywhere (the ledger's migration 0019 names it too).
READ_ONLY = "read"


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
    # task's cap applies too), and the backoff base in seconds (None: the global setting).
    max_attempts: int | None = None
    backoff_base: float | None = None
    # Evidence for a reviewer: checks of the proposed arguments against earlier tool results of
    # the task, shown at the top of a gate (label, fn(arguments, results by tool) -> (ok, why)).
    checks: list[tuple[str, Check]] = field(default_factory=list)
    # The declared shape of the tool's result (pydantic model, TypedDict, ...); None: any object.
    result_type: Any = None

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

    def check_result(self, result: Any, *, text: bytes | None = None) -> None:
        """Raise ToolFailure(schema_mismatch) if the result breaks the declared result type.
        `text`: the result's JSON when the caller has it already."""
        if self.result_type is None:
            return
        try:
            TypeAdapter(self.result_type).validate_json(
                json.dumps(result) if text is None else text
            )
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


_TOOLS: dict[str, Tool] = {}
# What the policy engine knows of each tool, kept beside _TOOLS (`tool_entries`).
_TOOL_ENTRIES: dict[str, tuple[str, tuple[str, ...]]] = {}
_AGENTS: dict[str, Agent] = {}


def tool(
    *,
    side_effect: str,
    systems: tuple[str, ...] = (),
    idempotent_remote: bool = False,
    name: str | None = None,
    compensate_with: str | None = None,
    max_attempts: int | None = None,
    backoff_base: float | None = None,
    result: Any = None,
) -> Callable[[Callable[..., dict[str, Any]]], Tool]:
    """Register a function as a tool."""
    if side_effect not in SIDE_EFFECT_CLASSES:
        raise ValueError(f"side_effect must be one of {SIDE_EFFECT_CLASSES}")

    def register(fn: Callable[..., dict[str, Any]]) -> Tool:
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
            result_type=result if result is not None else _declared_result(fn),
        )
        spec.arguments_model  # noqa: B018 - build (and check) the contract at registration
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
    """What a plan step stores in `Step.spec`: its tool, and a fan-out or handoff if it has one."""
    spec: dict[str, Any] = {"tool": step.tool}
    if step.fan_out:
        spec["fan_out"] = step.fan_out
    if step.handoff:
        spec["handoff"] = step.handoff
    return spec


def register_agent(agent: Agent) -> Agent:
    for tool_name in agent.tools:
        get_tool(tool_name)
    _AGENTS[agent.name] = agent
    return agent


def get_tool(name: str) -> Tool:
    try:
        return _TOOLS[name]
    except KeyError:
        raise UnknownTool(name) from None


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


def tool_entries() -> Mapping[str, tuple[str, tuple[str, ...]]]:
    """`{name: (side_effect, systems)}` of every registered tool: a read-only view, not a copy
    (routing looks up one entry per proposed call)."""
    return MappingProxyType(_TOOL_ENTRIES)


def tools() -> list[Tool]:
    return sorted(_TOOLS.values(), key=lambda t: t.name)
