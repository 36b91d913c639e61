"""What an agent needs from the deployment, and which agents this deployment can run.

An agent declares the settings it cannot work without (`Agent.needs`: `Need`s, each an environment
variable and what it is for: the base URL of the services its tools call, a credential); the
stdio MCP servers it takes tools from need their program too (a `python -m module` server, its
module). An agent with every need met is *offered*: the start form and the API's list show it and
`task_create` starts it. Any other is refused there with `AgentUnavailable`, which names the
agent and what it misses, and a worker that claims one of its tasks (started before, or by a
process configured otherwise) stops the task as `unknown_agent` with the same words;
`check --deploy` lists each agent that is not offered and why (`agentops.checks`).

The constraint: one rule, read from the process's own configuration, in every process: a need
is met when its variable is set to something other than blanks. A variable the engine reads
itself (`AGENTOPS_<KEY>`, or a key of `settings.AGENTOPS` such as `OPENAI_API_KEY`) is read as
the settings have it, so development mode's defaults count (`AGENTOPS_SIM_BASE_URL` is the
simulated services' address under `make run`, unset in production); any other variable is read
from the environment.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings

from agentops.engine.errors import AgentUnavailable
from agentops.engine.registry import Agent, Need, agents
from policies.phrases import Phrase, gettext_noop

ENGINE_PREFIX = "AGENTOPS_"


@dataclass(frozen=True)
class Missing:
    """One thing an agent needs and this process lacks, in the words shown to a person."""

    what: str
    purpose: str
    why: str

    def __str__(self) -> str:
        return f"{self.what} ({self.purpose}), which {self.why}"


def need_met(need: Need) -> bool:
    """Its variable is set here to something other than blanks."""
    return bool(setting_value(need.variable).strip())


def setting_value(variable: str) -> str:
    """The value the process runs with: the settings' for a variable the engine reads, the
    environment's for any other ("" when unset)."""
    engine = settings.AGENTOPS
    key = variable.removeprefix(ENGINE_PREFIX)
    if key in engine:
        return str(engine[key] or "")
    return os.environ.get(variable, "")


def agent_missing(agent: Agent) -> list[Missing]:
    """What `agent` needs and this process lacks, in declaration order: its needs, then the
    programs of its stdio MCP servers."""
    missing = [
        Missing(need.variable, need.purpose, "is not set")
        for need in agent.needs
        if not need_met(need)
    ]
    for server in agent.mcp_servers:
        command = tuple(getattr(server, "command", ()) or ())
        absent = _program_absent(command)
        if absent:
            missing.append(Missing(f"MCP server {server.name!r}", absent, "is not installed"))
    return missing


def _program_absent(command: tuple[str, ...]) -> str:
    """What of a stdio server's command cannot be found here ("" when it all can): its program,
    or the module of `<this python> -m module`."""
    if not command:
        return ""  # a streamable-HTTP server: reached at its URL when a step lists it
    program = command[0]
    if shutil.which(program) is None:
        return f"the program {program}"
    if (
        len(command) > 2
        and command[1] == "-m"
        and os.path.realpath(program) == os.path.realpath(sys.executable)
    ):
        module = command[2]
        if importlib.util.find_spec(module.partition(".")[0]) is None:
            return f"the Python module {module}"
    return ""


def missing_words(agent: Agent, missing: Iterable[Missing]) -> Phrase:
    """One sentence: which agent cannot run here, and each thing it misses (settings, named as
    written)."""
    return Phrase(
        gettext_noop("agent %(agent)s cannot run here: it needs %(needs)s (%(doc)s)"),
        {
            "agent": repr(agent.name),
            "needs": "; ".join(str(m) for m in missing),
            "doc": 'docs/operations.md, "Agents and what they need"',
        },
    )


def agent_check_available(agent: Agent) -> None:
    """Raise AgentUnavailable naming what `agent` lacks in this process, if anything."""
    missing = agent_missing(agent)
    if missing:
        raise AgentUnavailable(agent.name, missing_words(agent, missing))


def agents_offered() -> list[Agent]:
    """The agents a person may start here, by name: registered, not hidden, every need met."""
    return [agent for agent in agents() if not agent.hidden and not agent_missing(agent)]


def agents_unavailable() -> list[tuple[Agent, list[Missing]]]:
    """Every registered agent this process cannot run (hidden ones too), with what it lacks."""
    return [(agent, missing) for agent in agents() if (missing := agent_missing(agent))]
