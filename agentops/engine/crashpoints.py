"""Named points where a test can make the worker process die with SIGKILL (or freeze).

`AGENTOPS_CRASH_AT=<point>[@<step ordinal>]` arms one point in a worker's environment;
`AGENTOPS_CRASH_SIGNAL=SIGSTOP` freezes the process there instead of killing it (a VM pause, a
long GC), for the tests of a holder frozen inside a transaction. Production never sets them; the
check is one dict lookup. A kill during a tool call is done from outside, while the simulated
service is slow.
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset(
    {
        "after_claim",
        "after_model_result",
        "after_pending",
        "after_tool_call",
        "inside_step_complete",
        "during_snapshot",
        "rollback_after_pending",
        "rollback_after_tool_call",
        "after_fan_out",
        "fan_out_collected",
        "after_handoff",
        # An MCP server answered a call; the worker dies before the ledger records it.
        "mcp_answered",
    }
)


def _armed() -> tuple[str, int | None] | None:
    spec = os.environ.get("AGENTOPS_CRASH_AT")
    if not spec:
        return None
    point, _, ordinal = spec.partition("@")
    if point not in POINTS:
        raise ValueError(f"AGENTOPS_CRASH_AT: unknown point {point!r}")
    return point, int(ordinal) if ordinal else None


def crashpoint(point: str, *, step: int | None = None) -> None:
    """Die (or freeze) here, at once and without cleanup, if a test armed this point (and step)."""
    armed = _armed()
    if armed is None:
        return
    name, ordinal = armed
    if name == point and (ordinal is None or ordinal == step):
        how = os.environ.get("AGENTOPS_CRASH_SIGNAL", "SIGKILL")
        os.kill(os.getpid(), signal.SIGSTOP if how == "SIGSTOP" else signal.SIGKILL)
