"""The `mcp-git` demo scenario's world: a temporary git repository with one commit and one
staged change, the person who approves the commit, and what the run did to the repository.

The agent (`agentops.agents.mcpdemo.mcp_git`) reaches the repository only through the
reference `mcp-server-git`, spawned by the worker that runs the task.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group, Permission, User

from agentops.models import Task, ToolCall

# The repository starts with this many commits.
INITIAL_COMMITS = 1
DEMO_APPROVER = "demo-operator"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=30
    ).stdout


def repository_prepare() -> dict[str, Any]:
    """A new repository under the system's temporary directory; the task's input names it."""
    repo = Path(tempfile.mkdtemp(prefix="agentops-mcp-git-"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "agent@example.com")
    _git(repo, "config", "user.name", "AgentOps demo")
    (repo / "README.md").write_text("# Demo repository\n")
    _git(repo, "add", "README.md")
    _git(repo, "commit", "-q", "-m", "Initial commit")
    (repo / "CHANGES.md").write_text("- The agent committed this change through MCP.\n")
    _git(repo, "add", "CHANGES.md")
    return {"repo_path": str(repo), "message": "Add the changelog"}


def commits_made(task: Task) -> int:
    """New commits in the task's repository since it was prepared."""
    repo = Path(str(task.input.get("repo_path", "")))
    return int(_git(repo, "rev-list", "--count", "HEAD").strip()) - INITIAL_COMMITS


def mcp_ledger(task: Task) -> list[dict[str, Any]]:
    """The task's calls of MCP tools (named `<server>__<tool>`), oldest first."""
    return [
        {
            "tool": call.tool,
            "side_effect": call.side_effect,
            "route": call.step.route,
            "status": call.status,
        }
        for call in ToolCall.objects.filter(task=task, tool__contains="__")
        .select_related("step")
        .order_by("id")
    ]


def demo_approver() -> User:
    """The operator who approves the scenario's gates (not the task's starter)."""
    user, _ = User.objects.get_or_create(username=DEMO_APPROVER)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    user.user_permissions.add(Permission.objects.get(codename="decide_gate"))
    return user
