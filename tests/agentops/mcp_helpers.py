"""What the MCP tests share: a temporary git repository, the notes test server, and finding
the MCP server processes this process started."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from agentops.engine.mcptools import McpServer
from agentops.engine.model import ModelRequest
from agentops.engine.registry import Agent, PlanStep, register_agent

ROOT = Path(__file__).resolve().parents[2]
NOTES_SERVER = ROOT / "tests" / "mcp_notes_server.py"
# One directory per test process (xdist workers import this module each).
NOTES_DIR = Path(tempfile.mkdtemp(prefix="agentops-mcp-notes-"))
NOTES_FILE = NOTES_DIR / "notes.txt"
SCHEMA_FILE = NOTES_DIR / "schema.txt"

NOTES = McpServer(
    name="notes",
    command=(sys.executable, str(NOTES_SERVER)),
    env={"NOTES_FILE": str(NOTES_FILE), "NOTES_SCHEMA_FILE": str(SCHEMA_FILE)},
    timeout=3.0,
)
# The same server under another name, with a revoked credential: it never starts (it says why on
# stderr and exits). The token looks like a GitHub token, so what is stored of it is redacted.
REVOKED_TOKEN = "ghp_" + "R3v0k3d" * 4
ARCHIVE = McpServer(
    name="archive",
    command=(sys.executable, str(NOTES_SERVER)),
    env={"NOTES_FILE": str(NOTES_DIR / "archive.txt"), "NOTES_REFUSE_TOKEN": REVOKED_TOKEN},
    timeout=3.0,
)


def notes_script(request: ModelRequest) -> dict:
    """Each step proposes the call the task input lists for it."""
    name, arguments = request.task_input["calls"][request.step]
    return {"text": "", "tool_calls": [{"name": name, "arguments": arguments}], "confidence": 0.9}


def notes_plan(task_input: dict) -> list[PlanStep]:
    return [PlanStep(f"Call {name}", name) for name, _ in task_input["calls"]]


register_agent(
    Agent(
        name="mcp_notes_test",
        system_prompt="Keep notes.",
        tools=[],
        mcp_servers=(NOTES,),
        plan=notes_plan,
        script=notes_script,
        hidden=True,
    )
)


# What the model was offered at each step of the two-server agent (its script writes it down).
OFFERED: list[list[str]] = []


def two_servers_script(request: ModelRequest) -> dict:
    OFFERED.append(sorted(tool["name"] for tool in request.tools))
    return notes_script(request)


def two_servers_plan(task_input: dict) -> list[PlanStep]:
    """A step per call; with `model_chooses`, the plan names no tool (the model picks one)."""
    chooses = bool(task_input.get("model_chooses"))
    return [PlanStep(f"Call {name}", None if chooses else name) for name, _ in task_input["calls"]]


register_agent(
    Agent(
        name="mcp_two_servers_test",
        system_prompt="Keep notes; archive them.",
        tools=[],
        mcp_servers=(NOTES, ARCHIVE),
        plan=two_servers_plan,
        script=two_servers_script,
        hidden=True,
    )
)


def notes_written() -> list[str]:
    return NOTES_FILE.read_text().splitlines() if NOTES_FILE.exists() else []


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def git_repository(path: Path) -> Path:
    """A repository with one commit and one staged file."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "agent@example.com")
    git(path, "config", "user.name", "Agent")
    (path / "README.md").write_text("# Notes\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "Initial commit")
    (path / "CHANGES.md").write_text("- first change\n")
    git(path, "add", "CHANGES.md")
    return path


def commits(repo: Path) -> int:
    return int(git(repo, "rev-list", "--count", "HEAD").strip())


def server_pids(marker: str = "mcp_notes_server.py", env: str = str(NOTES_FILE)) -> list[int]:
    """Processes whose command line holds `marker` and whose environment holds `env`: the MCP
    servers this test process started."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and env.encode() in environ:
            pids.append(int(proc.name))
    return pids
