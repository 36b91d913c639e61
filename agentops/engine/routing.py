"""The one function that routes a proposed action to a lane.

Until the policy engine exists every action is `auto`; `route_action` is the seam it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentops.models import Task


@dataclass(frozen=True)
class ProposedAction:
    tool: str
    side_effect: str
    systems: tuple[str, ...]
    arguments: dict[str, Any]
    agent: str
    step: int
    confidence: float | None = None
    amount: float | None = None
    edited: bool = False


@dataclass(frozen=True)
class Verdict:
    route: str
    rule: str
    reasons: tuple[str, ...] = ()
    version: int | None = None
    sample_rate: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def route_action(*, task: Task, action: ProposedAction) -> Verdict:
    """Decide the lane for `action` under the policy pinned by `task`."""
    return Verdict(
        route="auto",
        rule="built-in: auto",
        reasons=("no policy engine is installed: every action runs autonomously",),
    )
