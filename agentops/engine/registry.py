"""Agents and tools, declared in Python and registered by name.

A tool is a typed function `fn(call: ToolContext, **arguments) -> dict` plus what the ledger and the
policy need to know about it: its side-effect class, the systems it touches, whether the remote
honours idempotency keys, and optional `probe` and `compensate` hooks. An agent is a name, a system
prompt, the tools it may use and a plan (a fixed list of steps, or None when the model plans).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentops.engine.errors import ModelFailure, UnknownAgent, UnknownTool

SIDE_EFFECT_CLASSES = ("read", "write", "notify", "financial")


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
    probe_fn: Callable[[ToolContext], dict[str, Any] | None] | None = None
    compensate_with: str | None = None
    compensation_args: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    # The tool's own retry policy: at most this many attempts of a step that calls it (the
    # task's cap applies too), and the backoff base in seconds (None: the global setting).
    max_attempts: int | None = None
    backoff_base: float | None = None
    # Evidence for a reviewer: checks of the proposed arguments against earlier tool results of
    # the task, shown at the top of a gate (label, fn(arguments, results by tool) -> (ok, why)).
    checks: list[tuple[str, Callable[..., tuple[bool, str]]]] = field(default_factory=list)

    def parameters(self) -> dict[str, type]:
        """Keyword-only parameters of the tool function and their annotated types."""
        hints = typing.get_type_hints(self.fn)
        return {
            name: hints.get(name, object)
            for name, param in inspect.signature(self.fn).parameters.items()
            if param.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        """Raise ModelFailure(output_invalid) if the model's arguments do not fit the signature."""
        params = self.parameters()
        required = {
            name
            for name, param in inspect.signature(self.fn).parameters.items()
            if param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is param.empty
        }
        unknown = set(arguments) - set(params)
        missing = required - set(arguments)
        if unknown or missing:
            raise ModelFailure(
                f"tool {self.name}: unexpected arguments {sorted(unknown)}, "
                f"missing {sorted(missing)}",
                kind="output_invalid",
            )
        for name, value in arguments.items():
            expected = params[name]
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                continue
            origin = typing.get_origin(expected) or expected
            if origin is not object and isinstance(origin, type) and not isinstance(value, origin):
                raise ModelFailure(
                    f"tool {self.name}: argument {name} should be {origin.__name__}, "
                    f"got {type(value).__name__}",
                    kind="output_invalid",
                )

    def probe(self, fn: Callable[[ToolContext], dict[str, Any] | None]) -> Callable:
        """Decorator: ask the remote whether the effect with this key happened (None: not)."""
        self.probe_fn = fn
        return fn

    def compensation(
        self, fn: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    ) -> Callable:
        """Decorator: map (original arguments, recorded result) to the compensating tool's args."""
        self.compensation_args = fn
        return fn

    def check(self, label: str) -> Callable:
        """Decorator: a check of the arguments against earlier results, `fn(arguments, results)`
        returning (passed, explanation); `results` maps tool names to their latest result."""

        def register(fn: Callable[..., tuple[bool, str]]) -> Callable[..., tuple[bool, str]]:
            self.checks.append((label, fn))
            return fn

        return register

    def schema(self) -> dict[str, Any]:
        names = {
            str: "string",
            int: "integer",
            float: "number",
            bool: "boolean",
            dict: "object",
            list: "array",
        }
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": {
                    n: {"type": names.get(t, "string")} for n, t in self.parameters().items()
                },
            },
        }


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
    extra: dict[str, Any] = field(default_factory=dict)
    # Input fields a person may change on a running or paused task (`task_modify`).
    editable_input: tuple[str, ...] = ()


_TOOLS: dict[str, Tool] = {}
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
        )
        _TOOLS[spec.name] = spec
        return spec

    return register


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


def get_agent(name: str) -> Agent:
    try:
        return _AGENTS[name]
    except KeyError:
        raise UnknownAgent(name, sorted(_AGENTS)) from None


def agents() -> list[Agent]:
    return sorted(_AGENTS.values(), key=lambda a: a.name)


def tools() -> list[Tool]:
    return sorted(_TOOLS.values(), key=lambda t: t.name)
