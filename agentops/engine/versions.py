"""Which declaration of an agent, and which model, made each step; and the rule when a task's
agent is re-declared while the task runs.

An agent's version is a digest of its declaration: its plan (and its declared strategies), its
tools (each one's name, side effect, systems and the JSON schema the model sees) and its prompt.
The behaviour of the scripted model (`Agent.script`) is not part of it: it stands for the model,
not for the declaration. A plan given as a function is digested by its code. A task pins the
version it was created under (`Task.agent_version`: the digest and one short digest per part,
so a change can be named); every step records the version that ran it and the model's name.

The rule (docs/agents.md): a worker that claims a task whose agent's declaration differs from
the pinned one stops the task with `agent_changed`, naming the parts that changed, before any
step runs under the new declaration. A person's retry accepts the declaration the worker saw
(the pin moves to it, and the event says from which to which); an abort keeps the record as is.
Pure Python apart from the registry and the settings; nothing here writes.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentops.engine.errors import FailureKind, OrchestrationFailure
from agentops.engine.jsonvalues import digest
from agentops.engine.registry import Agent, PlanStep, get_tool

# The parts of a declaration a change is named by.
PARTS = ("plan", "tools", "prompts")
SHORT = 12


@dataclass(frozen=True)
class AgentVersion:
    """The digest of an agent's declaration, and a short digest of each part."""

    digest: str
    parts: dict[str, str]

    def as_pin(self) -> dict[str, Any]:
        """What `Task.agent_version` stores."""
        return {"digest": self.digest, "parts": dict(self.parts)}

    @property
    def short(self) -> str:
        return self.digest[:SHORT]


def _plan_steps(steps: list[PlanStep]) -> list[dict[str, Any]]:
    return [
        {
            "title": s.title,
            "tool": s.tool,
            "depends_on": list(s.depends_on),
            "fan_out": s.fan_out,
            "handoff": s.handoff,
            "instruction": s.instruction,
        }
        for s in steps
    ]


def _plan_value(plan: Any) -> Any:
    """A plan as data: its steps, or a function's code (a plan made from the task input)."""
    if plan is None:
        return None
    if callable(plan):
        return _code_value(plan)
    return _plan_steps(list(plan))


def _code_value(fn: Callable[..., Any]) -> dict[str, Any]:
    code = getattr(fn, "__code__", None)
    return {
        "function": f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}",
        **(_code_parts(code) if code is not None else {"code": "", "consts": []}),
    }


def _code_parts(code: types.CodeType) -> dict[str, Any]:
    """A code object as the same data in every process: its bytecode and its constants, nested
    code (a comprehension, a lambda) as data too, not as its repr (which holds an address), and
    a set's members in order (a set's repr follows the process's string hashing)."""
    return {"code": code.co_code.hex(), "consts": [_const_value(c) for c in code.co_consts]}


def _const_value(value: Any) -> Any:
    if isinstance(value, types.CodeType):
        return _code_parts(value)
    if isinstance(value, frozenset):
        return sorted(repr(item) for item in value)
    if isinstance(value, tuple):
        return [_const_value(item) for item in value]
    return repr(value)


def _tool_value(name: str) -> dict[str, Any]:
    tool = get_tool(name)
    return {
        "name": tool.name,
        "side_effect": tool.side_effect,
        "systems": list(tool.systems),
        "schema": tool.schema(),
    }


def agent_version(agent: Agent) -> AgentVersion:
    """The version of `agent`'s declaration as registered in this process."""
    parts_values = {
        "plan": {
            "plan": _plan_value(agent.plan),
            "strategies": {name: _plan_value(p) for name, p in sorted(agent.strategies.items())},
        },
        "tools": [_tool_value(name) for name in agent.tools],
        "prompts": {"system_prompt": agent.system_prompt},
    }
    parts = {name: digest(value)[:SHORT] for name, value in parts_values.items()}
    return AgentVersion(digest=digest(parts_values), parts=parts)


def model_name(agent: Agent) -> str:
    """The name of the model that answers for `agent`: its own, else the settings' default
    (the scripted model is "scripted")."""
    adapter = agent.adapter or settings.AGENTOPS["MODEL_ADAPTER"]
    if adapter == "scripted":
        return "scripted"
    return str(agent.model or settings.AGENTOPS["OPENAI_MODEL"])[:100]


def changed_parts(pinned: dict[str, Any], now: AgentVersion) -> list[str]:
    """The parts of the declaration that differ from the pinned one (all, if it names none)."""
    parts = pinned.get("parts")
    before: dict[str, Any] = parts if isinstance(parts, dict) else {}
    return [p for p in PARTS if before.get(p) != now.parts.get(p)]


def version_check(pinned: Any, agent: Agent) -> tuple[AgentVersion, OrchestrationFailure | None]:
    """The agent's version now, and the failure that stops the task when it is not the pinned
    one (None: it is, or the task pinned none: created before versions were recorded)."""
    now = agent_version(agent)
    if not isinstance(pinned, dict) or not pinned.get("digest") or pinned["digest"] == now.digest:
        return now, None
    changed = changed_parts(pinned, now)
    return now, OrchestrationFailure(
        f"agent {agent.name} was re-declared since the task started ({', '.join(changed)} "
        f"changed: version {str(pinned['digest'])[:SHORT]} -> {now.short})",
        kind=FailureKind.AGENT_CHANGED,
        retryable=False,
        detail={"pinned": pinned, "now": now.as_pin(), "changed": changed},
    )


def accepted_pin(failure: Any) -> dict[str, Any] | None:
    """The declaration a retry accepts after an `agent_changed` stop: the one the worker saw
    (None: the failure is of another kind)."""
    if not isinstance(failure, dict) or failure.get("kind") != FailureKind.AGENT_CHANGED:
        return None
    detail = failure.get("detail")
    now = detail.get("now") if isinstance(detail, dict) else None
    return now if isinstance(now, dict) and now.get("digest") else None
