"""The agent author's one door: everything a module that declares agents and tools imports.

An agent (`Agent`: a name, a system prompt, its tools, its `PlanStep`s or none, its model and
context rules, the settings it `Need`s) and its tools (`@tool`: side-effect class, systems, retry
policy, timeout, whether the remote deduplicates idempotency keys, and `probe` / `compensation` /
`check` hooks) are declared with these names and registered on import (`register_agent`). A tool
receives a `ToolContext` and signals failure with `ToolFailure(kind=FailureKind...)`; a scripted
model reads a `ModelRequest`. The rest is for the agents that need it: MCP servers (`McpServer`),
child tasks (`fan_out`, `ChildSpec`), a question to a person (`ask_human`, `ASK_HUMAN`), and the
helpers an HTTP tool calls a service with and classifies its answers by (`http_post`, `http_probe`,
`http_answer`: the product's one rule for what an answer means; `retry_after_seconds`, `SCOPE`).
docs/agents.md is the tutorial.

The constraint: the shipped agents, and agents of other installed packages (registered through
the `agentops.agents` entry-point group, `agentops.engine.entrypoints`), import nothing else of
the product (tests/test_boundaries.py), so the engine behind this module may change freely while
these names keep their meaning. Nothing in the engine imports this module, and importing it is
cheap: each name is loaded from its engine module on first use, so `import agentops.sdk` loads no
engine module and a tool module loads neither the models nor the runner.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentops.engine.children import ChildSpec, fan_out
    from agentops.engine.errors import FailureKind, ToolFailure
    from agentops.engine.httpcalls import http_answer, http_post, http_probe
    from agentops.engine.mcptools import McpServer
    from agentops.engine.model import ModelRequest
    from agentops.engine.questions import ASK_HUMAN, ask_human
    from agentops.engine.registry import (
        Agent,
        Need,
        PlanStep,
        SideEffect,
        Tool,
        ToolContext,
        register_agent,
        tool,
    )
    from agentops.engine.retry_after import retry_after_seconds
    from agentops.engine.scopes import SCOPE

# Each name and the engine module it lives in, loaded on first use (`__getattr__` below); the
# imports under TYPE_CHECKING say the same for mypy, `__all__` for readers (a test checks the
# three agree).
_HOMES: dict[str, tuple[str, ...]] = {
    "agentops.engine.registry": (
        "Agent",
        "Need",
        "PlanStep",
        "SideEffect",
        "Tool",
        "ToolContext",
        "register_agent",
        "tool",
    ),
    "agentops.engine.model": ("ModelRequest",),
    "agentops.engine.errors": ("FailureKind", "ToolFailure"),
    "agentops.engine.mcptools": ("McpServer",),
    # Fan-out and questions live with their runners, which use the models: first use needs
    # Django set up, as at start-up, where agents are imported (AppConfig.ready).
    "agentops.engine.children": ("ChildSpec", "fan_out"),
    "agentops.engine.questions": ("ASK_HUMAN", "ask_human"),
    "agentops.engine.httpcalls": ("http_answer", "http_post", "http_probe"),
    "agentops.engine.retry_after": ("retry_after_seconds",),
    "agentops.engine.scopes": ("SCOPE",),
}

__all__ = [
    "ASK_HUMAN",
    "SCOPE",
    "Agent",
    "ChildSpec",
    "FailureKind",
    "McpServer",
    "ModelRequest",
    "Need",
    "PlanStep",
    "SideEffect",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ask_human",
    "fan_out",
    "http_answer",
    "http_post",
    "http_probe",
    "register_agent",
    "retry_after_seconds",
    "tool",
]

if not TYPE_CHECKING:
    # Hidden from mypy: a module-level __getattr__ would type every misspelt name as Any.

    def __getattr__(name: str) -> Any:
        """Load a name on first use (PEP 562)."""
        for module, names in _HOMES.items():
            if name in names:
                value = getattr(import_module(module), name)
                globals()[name] = value
                return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
