"""What the recovery advisor weighs about a stopped task (`Situation`), its actions, risks and
progress bands, and the failure kinds it groups (transient, auto-retried, restartable, skippable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentops.engine.errors import LAYER_KINDS, FailureKind

K = FailureKind


class Action(StrEnum):
    RETRY = "retry"
    SKIP = "skip"
    ROLLBACK = "rollback"
    ABORT = "abort"
    CONFIRM = "confirm"
    # Grant the scope a service refused the call for, then retry (`engine.grants`).
    GRANT = "grant"
    # Change the plan (a step's instruction, a step added or removed, another strategy), then
    # retry: not an intervention of its own, the recovery panel's plan-repair form.
    REPAIR = "repair"


class Risk(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Band(StrEnum):
    """Where the task is: early work is cheap to redo, late work is worth finishing."""

    EARLY = "early"
    MIDDLE = "middle"
    LATE = "late"


EARLY_BELOW = 0.25
LATE_FROM = 0.75

RISK_BY_SIDE_EFFECT: Mapping[str, Risk] = {
    "read": Risk.LOW,
    "write": Risk.MEDIUM,
    "destructive": Risk.HIGH,
    "notify": Risk.MEDIUM,
    "financial": Risk.HIGH,
}

# The failure kinds the engine records, by layer (one enum: agentops.engine.errors.FailureKind).
KINDS: Mapping[str, frozenset[str]] = {
    str(layer): frozenset(str(k) for k in kinds) for layer, kinds in LAYER_KINDS.items()
}

TRANSIENT = frozenset({K.RATE_LIMITED, K.TIMEOUT, K.UNAVAILABLE})
# Kinds the engine retries by itself until the step's cap; every other kind stops the task at once.
AUTO_RETRIED = TRANSIENT | {K.OUTPUT_INVALID, K.CONTEXT_OVERFLOW}
# Failures of this run rather than of the world: a fresh start is a real alternative to repair.
RESTARTABLE = frozenset(
    {
        K.OUTPUT_INVALID,
        K.CONTEXT_OVERFLOW,
        K.PLANNING_LOOP,
        K.LOW_CONFIDENCE,
        K.BAD_REQUEST,
        K.CONFLICT,
        K.RETRY_CAP,
    }
)
# Failures for which leaving a late read or notification undone is a fair trade.
SKIPPABLE = (KINDS["tool"] - {K.SIDE_EFFECT_UNKNOWN}) | {
    K.OUTPUT_INVALID,
    K.CONTEXT_OVERFLOW,
    K.PLANNING_LOOP,
    K.LOW_CONFIDENCE,
    K.RETRY_CAP,
}


def risk_of(side_effect: str | None) -> Risk:
    """Risk of a step from its tool's side-effect class; no tool or an unknown class is low."""
    return RISK_BY_SIDE_EFFECT.get(side_effect or "", Risk.LOW)


def band_of(progress: float) -> Band:
    if progress < EARLY_BELOW:
        return Band.EARLY
    if progress >= LATE_FROM:
        return Band.LATE
    return Band.MIDDLE


@dataclass(frozen=True)
class Situation:
    """Everything the advisor weighs about a stopped task.

    `progress` is the fraction of steps done (0..1). `compensable`: some succeeded effect has a
    compensating tool. `irreversible`: some succeeded effect has none.
    """

    kind: str
    layer: str
    side_effect: str | None = None
    progress: float = 0.0
    step_attempts: int = 0
    step_retry_cap: int = 3
    task_recoveries: int = 0
    task_recovery_cap: int = 5
    compensable: bool = False
    irreversible: bool = False
    # The task stopped while undoing its effects (a rollback is unfinished).
    rolling_back: bool = False
    # Manual retries of this step that already ended in this same failure kind.
    failed_retries: int = 0
    # How many times reviewers rejected the stuck step's action at its gate (a reject loop).
    rejected_by_people: int = 0
    # The scope a service refused the call for, when it named one (`engine.grants`).
    missing_scope: str | None = None
    # The stuck step's instruction may change (nothing of it is recorded as run), or the plan
    # has steps that have not started: the plan can be repaired (engine/planedit.py).
    repairable: bool = False

    @property
    def risk(self) -> Risk:
        return risk_of(self.side_effect)

    @property
    def band(self) -> Band:
        return band_of(self.progress)

    @property
    def step_cap_reached(self) -> bool:
        return self.step_attempts >= self.step_retry_cap

    @property
    def task_cap_reached(self) -> bool:
        return self.task_recoveries >= self.task_recovery_cap

    @property
    def stuck(self) -> bool:
        """The engine will not retry this by itself: a kind it never retries, or the cap is hit."""
        return self.kind not in AUTO_RETRIED or self.step_cap_reached

    def facts(self) -> dict[str, Any]:
        """Values a rationale may name."""
        return {
            "kind": self.kind.replace("_", " "),
            "layer": self.layer,
            "side_effect": self.side_effect or "no-tool",
            "risk": self.risk.value,
            "percent": round(max(0.0, min(self.progress, 1.0)) * 100),
            "attempts": self.step_attempts,
            "attempt_cap": self.step_retry_cap,
            "recoveries": self.task_recoveries,
            "recovery_cap": self.task_recovery_cap,
            "failed_retries": self.failed_retries,
            "rejected_by_people": self.rejected_by_people,
            "missing_scope": self.missing_scope or "",
        }
