"""Routing a proposed action to a lane, under the policy version the task pinned at creation.

The one seam between the engine and `policies`: the runner builds a policy `Action` here and asks
`policies.selectors.policy_evaluate` (pure evaluation over a cached, immutable version).
"""

from __future__ import annotations

from typing import Any

from agentops.engine.registry import Tool
from agentops.models import Task
from policies import catalog
from policies.engine import Action, Verdict
from policies.selectors import policy_evaluate
from policies.services import policy_version_ensure_active

__all__ = ["Action", "Verdict", "action_for", "route_action"]


def action_for(
    *,
    task: Task,
    tool: Tool,
    arguments: dict[str, Any],
    step: int,
    confidence: float | None,
    edited: bool = False,
) -> Action:
    """The Action the policy sees for a proposed call: built by `policies.catalog.action_for`,
    the one builder (the catalog knows every registered tool's side effect and systems)."""
    return catalog.action_for(
        tool=tool.name,
        arguments=arguments,
        agent=task.agent,
        step=step,
        confidence=confidence,
        edited=edited,
        systems=tool.systems,
    )


def route_action(*, task: Task, action: Action) -> Verdict:
    """The verdict of the task's pinned policy version for `action`."""
    version_id = task.policy_version_id or policy_version_ensure_active().pk
    return policy_evaluate(version_id=version_id, action=action)
