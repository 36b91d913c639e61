"""Human words for what the engine records: failure kinds and event actions.

Pure Python. The stored names stay the truth (pages show them in details and titles); these
labels are what a person reads first ("The hotels service refused: missing permission").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentops.engine.errors import FailureKind

K = FailureKind

# What a failure of each kind means, said of its subject (the service, the model, the task). Every
# kind has one (tests/agentops/test_failure_kinds.py).
KIND_LABELS: Mapping[FailureKind, str] = {
    K.AUTHORIZATION_GAP: "refused: missing permission",
    K.RATE_LIMITED: "is throttling calls (429)",
    K.TIMEOUT: "did not answer in time",
    K.UNAVAILABLE: "was unavailable",
    K.SCHEMA_MISMATCH: "answered in an unexpected shape",
    K.TOOL_SCHEMA_CHANGED: "changed a tool the task relies on (the call was not sent)",
    K.BAD_REQUEST: "rejected the request as invalid",
    K.CONFLICT: "reported a conflict with an earlier request",
    K.SIDE_EFFECT_UNKNOWN: "may or may not have acted: outcome unknown",
    K.OUTPUT_INVALID: "gave a malformed reply",
    K.CONTEXT_OVERFLOW: "outgrew its context window",
    K.PLANNING_LOOP: "kept proposing the same action",
    K.LOW_CONFIDENCE: "was not confident enough to act",
    K.BUDGET_OVERFLOW: "ran out of budget",
    K.PROCESS_CRASH: "crashed its worker repeatedly",
    K.RETRY_CAP: "used up its attempts",
    K.UNKNOWN_AGENT: "uses an agent the workers do not know",
    K.UNKNOWN_TOOL: "uses a tool the workers do not know",
    K.CHECKPOINT_MISMATCH: "has a checkpoint that disagrees with its log",
    K.TOOL_ERROR: "failed inside its tool (an unexpected error)",
    K.CHILD_FAILED: "has a child task that ended without succeeding",
    K.UNKNOWN_FAN_OUT: "uses a fan-out the workers do not know",
    K.AGENT_CHANGED: "uses an agent that was re-declared since the task started",
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
    "agentops.task.plan_repaired": "Plan repaired",
    "agentops.task.agent_accepted": "Re-declared agent accepted",
    "agentops.task.failed": "Task failed",
    "agentops.task.completed": "All steps done",
    "agentops.task.rollback_requested": "Rollback requested",
    "agentops.task.rollback_finished": "Rollback finished",
    "agentops.task.rolled_back": "Rolled back",
    "agentops.step.started": "Step started",
    "agentops.step.model_result": "Model answered",
    "agentops.step.gated": "Action sent for approval",
    "agentops.step.halted": "Stopped at a safe point (fleet stop)",
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


def kind_label(kind: str) -> str:
    """The words for a stored failure kind; a kind this code does not record reads as itself."""
    try:
        return KIND_LABELS[FailureKind(kind)]
    except (KeyError, ValueError):
        return kind.replace("_", " ") or "failed"


def failure_label(failure: Any) -> str:
    """`The hotels service refused: missing permission`, from a stored failure dict."""
    if not isinstance(failure, Mapping):
        return ""
    kind = str(failure.get("kind") or "")
    layer = str(failure.get("layer") or "")
    said = kind_label(kind)
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
