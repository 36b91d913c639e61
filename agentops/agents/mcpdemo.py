"""Agents that take their tools from MCP servers: the reference servers from PyPI.

`mcp_time` reads the clock through `mcp-server-time` (read-only tools: the auto lane).
`mcp_git` commits to a repository through `mcp-server-git`: it looks at the status (a read),
commits what is staged (a write the default policy gates) and reads the log. Both servers are
stdio commands run with the worker's own interpreter; they come with the dev extra
(`pip install -e '.[dev]'`), and a worker without them stops the step as `unavailable`.
"""

from __future__ import annotations

import sys
from typing import Any

from agentops.sdk import Agent, McpServer, ModelRequest, PlanStep, register_agent

TIME = McpServer(
    name="time",
    command=(sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"),
    description="The reference time server (mcp-server-time).",
)
GIT = McpServer(
    name="git",
    command=(sys.executable, "-m", "mcp_server_git"),
    description="The reference git server (mcp-server-git); each call names its repository.",
)


def _reply(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "text": f"Calling {name}.",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": 0.95,
    }


def time_script(request: ModelRequest) -> dict[str, Any]:
    zone = str(request.task_input.get("timezone", "Europe/Paris"))
    if request.step == 0:
        return _reply("time__get_current_time", {"timezone": zone})
    return _reply(
        "time__convert_time",
        {"source_timezone": zone, "time": "09:30", "target_timezone": "Asia/Tokyo"},
    )


def git_script(request: ModelRequest) -> dict[str, Any]:
    repo = str(request.task_input.get("repo_path", ""))
    if request.step == 0:
        return _reply("git__git_status", {"repo_path": repo})
    if request.step == 1:
        message = str(request.task_input.get("message", "Commit staged changes"))
        return _reply("git__git_commit", {"repo_path": repo, "message": message})
    return _reply("git__git_log", {"repo_path": repo, "max_count": 5})


register_agent(
    Agent(
        name="mcp_time",
        description="Tell the time in a zone and convert a meeting time (MCP: mcp-server-time).",
        system_prompt="You answer questions about time with the time tools.",
        tools=[],
        mcp_servers=(TIME,),
        plan=[
            PlanStep("Read the current time", "time__get_current_time"),
            PlanStep("Convert the meeting time", "time__convert_time", depends_on=(0,)),
        ],
        script=time_script,
        hidden=True,
    )
)

register_agent(
    Agent(
        name="mcp_git",
        description="Commit the staged changes of a repository (MCP: mcp-server-git).",
        system_prompt="You maintain a git repository with the git tools: look before you "
        "commit, and commit only what is staged.",
        tools=[],
        mcp_servers=(GIT,),
        plan=[
            PlanStep("Look at the repository's status", "git__git_status"),
            PlanStep("Commit the staged changes", "git__git_commit", depends_on=(0,)),
            PlanStep("Read the log", "git__git_log", depends_on=(1,)),
        ],
        script=git_script,
        hidden=True,
    )
)
