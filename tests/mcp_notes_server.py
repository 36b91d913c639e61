"""A small MCP server for the tests, built with the official SDK (`mcp.server.mcpserver`).

It keeps notes in a file (one line per effect, so tests count effects) and offers:
`add_note` (a write: not destructive, not idempotent), `count_notes` (read-only), `slow_note`
(no annotations at all: the conservative default), `fail_note` (answers `isError`) and
`clear_notes` (destructive: it erases every note).
A `NOTES_SCHEMA_FILE` holding 2 starts it with a changed `add_note` (a required `pinned`
argument), as an upgraded server would. `NOTES_REFUSE_TOKEN` set makes it refuse to start, as a
server whose credential was revoked does: it says so on stderr and exits 1 before the handshake.
Run: `python tests/mcp_notes_server.py [http PORT]` (stdio by default).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

if os.environ.get("NOTES_REFUSE_TOKEN"):
    sys.exit(f"notes: the token {os.environ['NOTES_REFUSE_TOKEN']} was revoked; not starting")

NOTES = Path(os.environ["NOTES_FILE"])
# The schema version the server starts with: from a file, so a test can "upgrade" the server.
_VERSION = os.environ.get("NOTES_SCHEMA_FILE")
SCHEMA = int(Path(_VERSION).read_text()) if _VERSION and Path(_VERSION).exists() else 1
WRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

server = MCPServer("notes")


def _append(text: str) -> int:
    with NOTES.open("a") as notes:
        notes.write(text.replace("\n", " ") + "\n")
    return len(NOTES.read_text().splitlines())


if SCHEMA == 1:

    @server.tool(name="add_note", description="Add a note.", annotations=WRITES)
    def add_note(text: str) -> str:
        return f"note {_append(text)} added"

else:

    @server.tool(name="add_note", description="Add a note.", annotations=WRITES)
    def add_note_v2(text: str, pinned: bool) -> str:
        return f"note {_append(('[pinned] ' if pinned else '') + text)} added"


@server.tool(
    name="count_notes",
    description="Count the notes.",
    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
)
def count_notes() -> dict[str, int]:
    return {"notes": len(NOTES.read_text().splitlines()) if NOTES.exists() else 0}


@server.tool(name="slow_note", description="Add a note after a while.")
def slow_note(text: str, seconds: float) -> str:
    time.sleep(seconds)
    return f"note {_append(text)} added"


@server.tool(name="fail_note", description="Refuse to add a note.", annotations=WRITES)
def fail_note(text: str) -> str:
    raise ToolError(f"notes are closed: {text}")


@server.tool(
    name="clear_notes",
    description="Erase every note.",
    annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
)
def clear_notes() -> str:
    erased = len(NOTES.read_text().splitlines()) if NOTES.exists() else 0
    NOTES.write_text("")
    return f"{erased} notes erased"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
