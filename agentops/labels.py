"""Human words for what the engine records: failure kinds and event actions.

Pure Python. The stored names stay the truth (pages show them in details and titles); these
labels are what a person reads first ("The hotels service refused: missing permission"), in the
reader's language (lazy: each is translated when it is shown).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy

from agentops.engine.errors import FailureKind

K = FailureKind

# What a failure of each kind means, said of its subject (the service, the model, the task). Every
# kind has one (tests/agentops/test_failure_kinds.py).
KIND_LABELS: Mapping[FailureKind, Promise] = {
    K.AUTHORIZATION_GAP: gettext_lazy("refused: missing permission"),
    K.RATE_LIMITED: gettext_lazy("is throttling calls (429)"),
    K.TIMEOUT: gettext_lazy("did not answer in time"),
    K.UNAVAILABLE: gettext_lazy("was unavailable"),
    K.SCHEMA_MISMATCH: gettext_lazy("answered in an unexpected shape"),
    K.TOOL_SCHEMA_CHANGED: gettext_lazy(
        "changed a tool the task relies on (the call was not sent)"
    ),
    K.BAD_REQUEST: gettext_lazy("rejected the request as invalid"),
    K.CONFLICT: gettext_lazy("reported a conflict with an earlier request"),
    K.SIDE_EFFECT_UNKNOWN: gettext_lazy("may or may not have acted: outcome unknown"),
    K.OUTPUT_INVALID: gettext_lazy("gave a malformed reply"),
    K.CONTEXT_OVERFLOW: gettext_lazy("outgrew its context window"),
    K.PLANNING_LOOP: gettext_lazy("kept proposing the same action"),
    K.LOW_CONFIDENCE: gettext_lazy("was not confident enough to act"),
    K.BUDGET_OVERFLOW: gettext_lazy("ran out of budget"),
    K.PROCESS_CRASH: gettext_lazy("crashed its worker repeatedly"),
    K.RETRY_CAP: gettext_lazy("used up its attempts"),
    K.UNKNOWN_AGENT: gettext_lazy("uses an agent the workers do not know"),
    K.UNKNOWN_TOOL: gettext_lazy("uses a tool the workers do not know"),
    K.CHECKPOINT_MISMATCH: gettext_lazy("has a checkpoint that disagrees with its log"),
    K.TOOL_ERROR: gettext_lazy("failed inside its tool (an unexpected error)"),
    K.CHILD_FAILED: gettext_lazy("has a child task that ended without succeeding"),
    K.UNKNOWN_FAN_OUT: gettext_lazy("uses a fan-out the workers do not know"),
    K.AGENT_CHANGED: gettext_lazy("uses an agent that was re-declared since the task started"),
}

EVENT_LABELS: Mapping[str, Promise] = {
    "agentops.task.created": gettext_lazy("Task created"),
    "agentops.task.claimed": gettext_lazy("Worker picked up the task"),
    "agentops.task.planned": gettext_lazy("Plan made"),
    "agentops.task.yielded": gettext_lazy("Worker handed the task back (time slice over)"),
    "agentops.task.awaiting_approval": gettext_lazy("Waiting for approval"),
    "agentops.task.retry_scheduled": gettext_lazy("Retry scheduled"),
    "agentops.task.stopped": gettext_lazy("Stopped for a person"),
    "agentops.task.held": gettext_lazy("Held for a person"),
    "agentops.task.succeeded": gettext_lazy("Task succeeded"),
    "agentops.task.paused": gettext_lazy("Paused"),
    "agentops.task.resumed": gettext_lazy("Resumed"),
    "agentops.task.aborted": gettext_lazy("Ended (aborted)"),
    "agentops.task.modified": gettext_lazy("Budgets or input changed"),
    "agentops.task.plan_repaired": gettext_lazy("Plan repaired"),
    "agentops.task.agent_accepted": gettext_lazy("Re-declared agent accepted"),
    "agentops.task.failed": gettext_lazy("Task failed"),
    "agentops.task.completed": gettext_lazy("All steps done"),
    "agentops.task.rollback_requested": gettext_lazy("Rollback requested"),
    "agentops.task.rollback_finished": gettext_lazy("Rollback finished"),
    "agentops.task.rolled_back": gettext_lazy("Rolled back"),
    "agentops.step.started": gettext_lazy("Step started"),
    "agentops.step.model_result": gettext_lazy("Model answered"),
    "agentops.step.gated": gettext_lazy("Action sent for approval"),
    "agentops.step.halted": gettext_lazy("Stopped at a safe point (fleet stop)"),
    "agentops.step.approved": gettext_lazy("Action approved"),
    "agentops.step.rejected": gettext_lazy("Action rejected"),
    "agentops.step.completed": gettext_lazy("Step completed"),
    "agentops.step.failed": gettext_lazy("Step failed"),
    "agentops.step.skipped": gettext_lazy("Step skipped"),
    "agentops.step.reset": gettext_lazy("Step reset for another try"),
    "agentops.ledger.pending": gettext_lazy("Tool call about to run"),
    "agentops.ledger.succeeded": gettext_lazy("Tool call succeeded"),
    "agentops.ledger.failed": gettext_lazy("Tool call failed"),
    "agentops.ledger.executed_unknown": gettext_lazy("Tool call outcome unknown"),
    "agentops.ledger.compensated": gettext_lazy("Effect undone (compensated)"),
    "agentops.ledger.confirmed_executed": gettext_lazy("A person confirmed the call happened"),
    "agentops.ledger.confirmed_not_executed": gettext_lazy(
        "A person confirmed the call did not happen"
    ),
    "agentops.task.handed_off": gettext_lazy("Handed off to another agent"),
    "agentops.task.restored": gettext_lazy("Restored from its checkpoint"),
    "agentops.task.awaiting_children": gettext_lazy("Waiting for child tasks"),
    "agentops.task.woken": gettext_lazy("Child tasks finished: queued again"),
    "agentops.step.fanned_out": gettext_lazy("Child tasks started"),
    "agentops.scope.granted": gettext_lazy("Scope granted"),
    "agentops.scope.revoked": gettext_lazy("Scope revoked"),
}

# A tool's class of side effect (`engine.registry.SideEffect`'s values), as a person reads it.
SIDE_EFFECT_LABELS: Mapping[str, Promise] = {
    "read": pgettext_lazy("side effect", "read"),
    "write": pgettext_lazy("side effect", "write"),
    "destructive": pgettext_lazy("side effect", "destructive"),
    "notify": pgettext_lazy("side effect", "notify"),
    "financial": pgettext_lazy("side effect", "financial"),
}

# The advisor's actions (`engine.advisor.Action`'s values), as a person reads them.
RECOVERY_ACTION_LABELS: Mapping[str, Promise] = {
    "retry": pgettext_lazy("recovery action", "retry"),
    "skip": pgettext_lazy("recovery action", "skip"),
    "rollback": pgettext_lazy("recovery action", "rollback"),
    "abort": pgettext_lazy("recovery action", "abort"),
    "confirm": pgettext_lazy("recovery action", "confirm"),
    "grant": pgettext_lazy("recovery action", "grant"),
    "repair": pgettext_lazy("recovery action", "repair"),
}

_SERVICE = re.compile(r"^([a-z_]+)\.[a-z_]+ ")


def kind_label(kind: str) -> str:
    """The words for a stored failure kind; a kind this code does not record reads as itself."""
    try:
        return str(KIND_LABELS[FailureKind(kind)])
    except (KeyError, ValueError):
        return kind.replace("_", " ") or _("failed")


def failure_words(failure: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """A stored failure's sentence in the reader's language, as a `%(name)s` pattern and its
    values (`service`: the tool's service, a name that stays as written; `said`: the kind's
    words), for a page to mark the name up (`failure_label`, the filter)."""
    kind = str(failure.get("kind") or "")
    layer = str(failure.get("layer") or "")
    said = {"said": kind_label(kind)}
    if layer == "tool":
        found = _SERVICE.match(str(failure.get("message") or ""))
        if found:
            # Translators: %(said)s is a failure kind's words, such as "did not answer in time".
            return _("The %(service)s service %(said)s"), {**said, "service": found.group(1)}
        return _("The service %(said)s"), said
    if layer == "model":
        return _("The model %(said)s"), said
    return _("The task %(said)s"), said


def failure_label(failure: Any) -> str:
    """`The hotels service refused: missing permission`, from a stored failure dict."""
    if not isinstance(failure, Mapping):
        return ""
    pattern, values = failure_words(failure)
    return pattern % values


def event_label(action: str) -> str:
    """A person's words for an event action; unknown actions read as their last parts."""
    if action in EVENT_LABELS:
        return str(EVENT_LABELS[action])
    parts = action.split(".")
    return " ".join(parts[1:]).replace("_", " ").capitalize() if len(parts) > 1 else action


def recovery_action_label(action: str) -> str:
    """A person's word for an advisor's action; an action this code does not know reads as
    itself."""
    label = RECOVERY_ACTION_LABELS.get(str(action))
    return str(label) if label is not None else str(action)


def side_effect_label(side_effect: str) -> str:
    """A person's word for a tool's class of side effect; an unknown class reads as itself."""
    label = SIDE_EFFECT_LABELS.get(str(side_effect))
    return str(label) if label is not None else str(side_effect)
