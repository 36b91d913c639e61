"""Human words for what the engine records: failure kinds and event actions.

Pure Python. The stored names stay the truth (pages show them in details and titles); these
labels are what a person reads first ("The hotels service refused: missing permission").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# What a failure of each kind means, said of its subject (the service, the model, the task).
KIND_LABELS: Mapping[str, str] = {
    "authorization_gap": "refused: missing permission",
    "rate_limited": "is throttling calls (429)",
    "timeout": "did not answer in time",
    "unavailable": "was unavailable",
    "schema_mismatch": "answered in an unexpected shape",
    "bad_request": "rejected the request as invalid",
    "conflict": "reported a conflict with an earlier request",
    "side_effect_unknown": "may or may not have acted: outcome unknown",
    "output_invalid": "gave a malformed reply",
    "context_overflow": "outgrew its context window",
    "planning_loop": "kept proposing the same action",
    "low_confidence": "was not confident enough to act",
    "budget_overflow": "ran out of budget",
    "process_crash": "crashed its worker repeatedly",
    "retry_cap": "used up its attempts",
    "unknown_agent": "uses an agent the workers do not know",
    "unknown_tool": "uses a tool the workers do not know",
    "checkpoint_mismatch": "has a checkpoint that disagrees with its log",
}

EVENT_LABELS: Mapping[str, str] = {
    "agentops.task.created": "Task created",
    "agentops.task.claimed": "Worker picked up the task",
    "agentops.task.planned": "Plan made",
    "agentops.task.yielded": "Worker handed the task back (time slice over)",
    "agentops.task.awaiting_approval": "Waiting for approval",
    "agentops.task.retry_scheduled": "Retry scheduled",
    "agentops.task.stopped": "Stopped for a person",
    "agentops.task.held": "Held for a person",
    "agentops.task.succeeded": "Task succeeded",
    "agentops.task.paused": "Paused",
    "agentops.task.resumed": "Resumed",
    "agentops.task.aborted": "Ended (aborted)",
    "agentops.task.modified": "Budgets or input changed",
    "agentops.task.failed": "Task failed",
    "agentops.task.completed": "All steps done",
    "agentops.task.rollback_requested": "Rollback requested",
    "agentops.task.rollback_finished": "Rollback finished",
    "agentops.task.rolled_back": "Rolled back",
    "agentops.step.started": "Step started",
    "agentops.step.model_result": "Model answered",
    "agentops.step.gated": "Action sent for approval",
    "agentops.step.approved": "Action approved",
    "agentops.step.rejected": "Action rejected",
    "agentops.step.completed": "Step completed",
    "agentops.step.failed": "Step failed",
    "agentops.step.skipped": "Step skipped",
    "agentops.step.reset": "Step reset for another try",
    "agentops.ledger.pending": "Tool call about to run",
    "agentops.ledger.succeeded": "Tool call succeeded",
    "agentops.ledger.failed": "Tool call failed",
    "agentops.ledger.executed_unknown": "Tool call outcome unknown",
    "agentops.ledger.compensated": "Effect undone (compensated)",
    "agentops.ledger.confirmed_executed": "A person confirmed the call happened",
    "agentops.ledger.confirmed_not_executed": "A person confirmed the call did not happen",
}

_SERVICE = re.compile(r"^([a-z_]+)\.[a-z_]+ ")


def failure_label(failure: Any) -> str:
    """`The hotels service refused: missing permission`, from a stored failure dict."""
    if not isinstance(failure, Mapping):
        return ""
    kind = str(failure.get("kind") or "")
    layer = str(failure.get("layer") or "")
    said = KIND_LABELS.get(kind, kind.replace("_", " ") or "failed")
    if layer == "tool":
        found = _SERVICE.match(str(failure.get("message") or ""))
        subject = f"The {found.group(1)} service" if found else "The service"
    elif layer == "model":
        subject = "The model"
    else:
        subject = "The task"
    return f"{subject} {said}"


def event_label(action: str) -> str:
    """A person's words for an event action; unknown actions read as their last parts."""
    if action in EVENT_LABELS:
        return EVENT_LABELS[action]
    parts = action.split(".")
    return " ".join(parts[1:]).replace("_", " ").capitalize() if len(parts) > 1 else action
