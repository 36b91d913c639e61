"""Named points where a test can make the worker process die with SIGKILL.

`AGENTOPS_CRASH_AT=<point>[@<step ordinal>]` arms one point in a worker's environment. Production
never sets it; the check is one dict lookup. The points are those the crash tests name; a kill
during a tool call is done from outside, while the simulated service is slow.
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
        "during_snapshot",
        "rollback_after_pending",
        "rollback_after_tool_call",
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
    """Die here, at once and without cleanup, if a test armed this point (and step)."""
    armed = _armed()
    if armed is None:
        return
    name, ordinal = armed
    if name == point and (ordinal is None or ordinal == step):
        os.kill(os.getpid(), signal.SIGKILL)
