"""The recovery advisor: what a person should do with a stopped task, and what each choice does.

Pure Python (no ORM, no settings): `advise` maps a failure (layer, kind), the failed step's
side-effect risk, the task's progress and its counters to one recommended intervention with a
one-line rationale, by the first matching row of `RULES`, the one table of this policy (rendered in
docs/recovery.md). `preview` says, for retry / skip / rollback / abort, which steps run, which
effects get compensated (in reverse order) and which stay because nothing can undo them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentops.engine.errors import LAYER_KINDS


class Action(StrEnum):
    RETRY = "retry"
    SKIP = "skip"
    ROLLBACK = "rollback"
    ABORT = "abort"
    CONFIRM = "confirm"


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
    "notify": Risk.MEDIUM,
    "financial": Risk.HIGH,
}

# The failure kinds the engine records, by layer (one enum: agentops.engine.errors.FailureKind).
KINDS: Mapping[str, frozenset[str]] = {
    str(layer): frozenset(str(k) for k in kinds) for layer, kinds in LAYER_KINDS.items()
}

TRANSIENT = frozenset({"rate_limited", "timeout", "unavailable"})
# Kinds the engine retries by itself until the step's cap; every other kind stops the task at once.
AUTO_RETRIED = TRANSIENT | {"output_invalid", "context_overflow"}
# Failures of this run rather than of the world: a fresh start is a real alternative to repair.
RESTARTABLE = frozenset(
    {
        "output_invalid",
        "context_overflow",
        "planning_loop",
        "low_confidence",
        "bad_request",
        "conflict",
        "retry_cap",
    }
)
# Failures for which leaving a late read or notification undone is a fair trade.
SKIPPABLE = (KINDS["tool"] - {"side_effect_unknown"}) | {
    "output_invalid",
    "context_overflow",
    "planning_loop",
    "low_confidence",
    "retry_cap",
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
        }


@dataclass(frozen=True)
class Rule:
    """One row of the table. A condition left as None matches anything."""

    name: str
    action: Action
    rationale: str
    kinds: frozenset[str] | None = None
    layers: frozenset[str] | None = None
    risks: frozenset[Risk] | None = None
    side_effects: frozenset[str] | None = None
    band: Band | None = None
    stuck: bool | None = None
    task_cap_reached: bool | None = None
    compensable: bool | None = None
    irreversible: bool | None = None
    rolling_back: bool | None = None

    def matches(self, s: Situation) -> bool:
        return (
            (self.kinds is None or s.kind in self.kinds)
            and (self.layers is None or s.layer in self.layers)
            and (self.risks is None or s.risk in self.risks)
            and (self.side_effects is None or s.side_effect in self.side_effects)
            and (self.band is None or s.band == self.band)
            and (self.stuck is None or s.stuck == self.stuck)
            and (self.task_cap_reached is None or s.task_cap_reached == self.task_cap_reached)
            and (self.compensable is None or s.compensable == self.compensable)
            and (self.irreversible is None or s.irreversible == self.irreversible)
            and (self.rolling_back is None or s.rolling_back == self.rolling_back)
        )


def _set(*values: str) -> frozenset[str]:
    return frozenset(values)


_A = Action
# First match wins; the last row matches everything. docs/recovery.md renders this table.
RULES: tuple[Rule, ...] = (
    Rule(
        "rollback-unfinished",
        _A.ROLLBACK,
        "A rollback stopped part-way; fix the cause and roll back again, or abort: moving "
        "forward would redo what was already undone.",
        rolling_back=True,
    ),
    Rule(
        "side-effect-unknown",
        _A.CONFIRM,
        "A call may have taken effect and the service cannot be asked; confirm whether it "
        "happened before anything else runs.",
        kinds=_set("side_effect_unknown"),
    ),
    Rule(
        "checkpoint-mismatch",
        _A.ABORT,
        "The checkpoint disagrees with the event log, so resuming could act on a wrong state; "
        "abort and check the ledger by hand.",
        kinds=_set("checkpoint_mismatch"),
    ),
    Rule(
        "crash-resume",
        _A.RETRY,
        "The worker died mid-task; resume from the last checkpoint: completed steps and "
        "recorded effects are not repeated.",
        kinds=_set("process_crash"),
        task_cap_reached=False,
    ),
    Rule(
        "crash-loop-late",
        _A.RETRY,
        "The task crashed its worker {recoveries} times, but {percent}% is done; fix the cause "
        "(memory, time limit) and resume rather than start over.",
        kinds=_set("process_crash"),
        band=Band.LATE,
    ),
    Rule(
        "crash-loop-undo",
        _A.ROLLBACK,
        "The task crashed its worker {recoveries} times (cap {recovery_cap}) at {percent}% "
        "done; undo its effects and start again once the cause is fixed.",
        kinds=_set("process_crash"),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "crash-loop",
        _A.ABORT,
        "The task crashed its worker {recoveries} times (cap {recovery_cap}) at {percent}% "
        "done; another resume would likely crash again, so abort and restart once fixed.",
        kinds=_set("process_crash"),
    ),
    Rule(
        "policy-deny-undo",
        _A.ROLLBACK,
        "The policy forbids this action, so a retry would be denied again; undo the effects so "
        "far and end the task, or change the policy first.",
        kinds=_set("authorization_gap"),
        layers=_set("orchestration"),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "policy-deny",
        _A.ABORT,
        "The policy forbids this action, so a retry would be denied again; abort, or change "
        "the policy and then retry.",
        kinds=_set("authorization_gap"),
        layers=_set("orchestration"),
    ),
    Rule(
        "early-undo-restart",
        _A.ROLLBACK,
        "Only {percent}% done and everything so far can be undone ({kind}); roll back and "
        "start a new task rather than repair this one.",
        kinds=RESTARTABLE,
        stuck=True,
        band=Band.EARLY,
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "early-restart",
        _A.ABORT,
        "Only {percent}% done and nothing to undo ({kind}); abort and start a new task rather "
        "than repair this one.",
        kinds=RESTARTABLE,
        stuck=True,
        band=Band.EARLY,
        compensable=False,
        irreversible=False,
    ),
    Rule(
        "budget-late",
        _A.RETRY,
        "The budget ran out at {percent}% done; extend it and resume: finishing is cheaper "
        "than starting over.",
        kinds=_set("budget_overflow"),
        band=Band.LATE,
    ),
    Rule(
        "budget-undo",
        _A.ROLLBACK,
        "The budget ran out at only {percent}% done; undo the effects so far, or extend the "
        "budget and retry if the goal is worth it.",
        kinds=_set("budget_overflow"),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "budget",
        _A.ABORT,
        "The budget ran out at only {percent}% done; abort, or extend the budget and retry if "
        "the goal is worth it.",
        kinds=_set("budget_overflow"),
    ),
    Rule(
        "unknown-tool",
        _A.RETRY,
        "A recorded call names a tool the workers no longer register (a deploy removed or "
        "renamed it); deploy it and retry: the ledger row is intact.",
        kinds=_set("unknown_tool"),
    ),
    Rule(
        "unknown-fan-out",
        _A.RETRY,
        "The plan names a fan-out the workers do not register (a deploy removed or renamed "
        "it); deploy it and retry: the children already spawned are kept.",
        kinds=_set("unknown_fan_out"),
    ),
    Rule(
        "child-failed",
        _A.ROLLBACK,
        "A child task ended without succeeding (aborted or rolled back), so this step cannot "
        "collect its results; roll back to undo the family's effects, or abort to keep them.",
        kinds=_set("child_failed"),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "child-failed-irreversible",
        _A.ABORT,
        "A child task ended without succeeding, so this step cannot collect its results; "
        "nothing here can be undone automatically: abort and settle the effects by hand.",
        kinds=_set("child_failed"),
    ),
    Rule(
        "unknown-agent",
        _A.RETRY,
        "The agent is not registered on the workers (a deploy removed or renamed it); deploy "
        "it and retry: the checkpoint is intact.",
        kinds=_set("unknown_agent"),
    ),
    Rule(
        "model-transient",
        _A.RETRY,
        "The model provider failed transiently ({kind}, attempt {attempts} of {attempt_cap}); "
        "retry with backoff: only this model call is repeated.",
        kinds=TRANSIENT,
        layers=_set("model"),
    ),
    Rule(
        "late-skip",
        _A.SKIP,
        "At {percent}% done a failing {side_effect} step ({kind}) should not hold the task; "
        "skip it and do it by hand, or retry once the cause is fixed.",
        kinds=SKIPPABLE,
        side_effects=_set("read", "notify"),
        band=Band.LATE,
        stuck=True,
    ),
    Rule(
        "tool-output-invalid",
        _A.RETRY,
        "The tool ran but returned output that cannot be stored ({kind}); fix the tool, then "
        "retry: its ledger row is resolved, so nothing runs twice behind your back.",
        kinds=_set("output_invalid", "tool_error"),
        layers=_set("tool"),
    ),
    Rule(
        "model-refused",
        _A.ABORT,
        "The model server refused the request itself (4xx); a retry would send the same "
        "request, so fix the model settings (name, key, adapter) and retry, or abort.",
        kinds=_set("bad_request"),
        layers=_set("model"),
    ),
    Rule(
        "output-invalid",
        _A.RETRY,
        "The model's reply was malformed (attempt {attempts} of {attempt_cap}); retry with a "
        "repair prompt.",
        kinds=_set("output_invalid"),
    ),
    Rule(
        "context-overflow",
        _A.RETRY,
        "The conversation outgrew the model's context window; retry with earlier work summarized.",
        kinds=_set("context_overflow"),
    ),
    Rule(
        "tool-rate-limited",
        _A.RETRY,
        "The service is throttling calls; retry after its Retry-After with the same "
        "idempotency key: nothing runs twice.",
        kinds=_set("rate_limited"),
        layers=_set("tool"),
    ),
    Rule(
        "tool-unreachable-read",
        _A.RETRY,
        "A low-risk call ({kind}) did not complete; repeating it changes nothing remotely.",
        kinds=_set("timeout", "unavailable"),
        layers=_set("tool"),
        risks=frozenset({Risk.LOW}),
    ),
    Rule(
        "tool-unreachable-write",
        _A.RETRY,
        "The {side_effect} call failed after it was sent ({kind}); the probe or the "
        "service's key dedup rules out a double effect, so retry with the same key.",
        kinds=_set("timeout", "unavailable"),
        layers=_set("tool"),
    ),
    Rule(
        "schema-mismatch",
        _A.RETRY,
        "The service answered in an unexpected shape; upgrade the tool adapter, then retry: "
        "the same key makes the service replay rather than act twice.",
        kinds=_set("schema_mismatch"),
    ),
    Rule(
        "tool-forbidden",
        _A.RETRY,
        "The service refused the call for lack of permission; grant the scope or reroute, "
        "then retry.",
        kinds=_set("authorization_gap"),
        layers=_set("tool"),
    ),
    Rule(
        "planning-loop",
        _A.RETRY,
        "The agent kept proposing the same action; edit the plan or the step's "
        "instructions, then retry.",
        kinds=_set("planning_loop"),
    ),
    Rule(
        "low-confidence",
        _A.RETRY,
        "The model's confidence stayed below the agent's floor for several steps in a row "
        "(confidence collapse); add guidance to the step, then retry.",
        kinds=_set("low_confidence"),
    ),
    Rule(
        "rejected-undo",
        _A.ROLLBACK,
        "The service rejected the recorded request ({kind}) and a retry would send it again; "
        "undo the effects so far and start over.",
        kinds=_set("bad_request", "conflict"),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "rejected",
        _A.ABORT,
        "The service rejected the recorded request ({kind}) and a retry would send it again; "
        "abort and start over.",
        kinds=_set("bad_request", "conflict"),
    ),
    Rule(
        "retry-cap",
        _A.RETRY,
        "The step used up its {attempt_cap} attempts; read its last error and retry once the "
        "cause is fixed.",
        kinds=_set("retry_cap"),
    ),
    Rule(
        "default",
        _A.ABORT,
        "Unrecognised failure ({layer}: {kind}); inspect the step's error and abort unless "
        "you know a retry is safe.",
    ),
)


@dataclass(frozen=True)
class Recommendation:
    """The advised action, why (one line), the actions a person may choose, and the row used."""

    action: Action
    rationale: str
    options: tuple[Action, ...]
    rule: str


def options_for(action: Action, situation: Situation) -> tuple[Action, ...]:
    """What a person may choose, the recommended action first.

    While an effect is unconfirmed only confirm and abort make sense: retry and skip would
    pass over it and rollback cannot compensate what may not have happened. Rollback is offered
    only when there is something to compensate.
    """
    if action is Action.CONFIRM:
        return (Action.CONFIRM, Action.ABORT)
    if situation.rolling_back:
        return (Action.ROLLBACK, Action.ABORT)
    offered = [Action.RETRY, Action.SKIP, Action.ROLLBACK, Action.ABORT]
    if not situation.compensable:
        offered.remove(Action.ROLLBACK)
    return (action, *[a for a in offered if a is not action])


def _after_failed_retry(situation: Situation) -> tuple[Action, str, str]:
    """What to recommend instead of a retry that a person already tried and that failed the same
    way: undo when everything can be undone, skip a late read or notification, else abort (or
    escalate the cause first)."""
    times = situation.failed_retries
    said = f"A manual retry already failed the same way ({situation.kind.replace('_', ' ')}, "
    said += f"{times} time{'s' if times != 1 else ''}); another retry would likely fail again. "
    if situation.compensable and not situation.irreversible:
        return Action.ROLLBACK, "retry-failed-undo", said + "Undo the effects so far and end it."
    if situation.side_effect in {"read", "notify"} and situation.band is Band.LATE:
        return Action.SKIP, "retry-failed-skip", said + "Skip the step and do it by hand."
    return (
        Action.ABORT,
        "retry-failed",
        said + "Escalate the cause to the service's owner, or abort.",
    )


def advise(situation: Situation) -> Recommendation:
    """The first row of `RULES` that matches `situation`, as a recommendation; a retry that a
    person already tried and that failed the same way is not recommended again."""
    rule = next(r for r in RULES if r.matches(situation))
    action, name = rule.action, rule.name
    rationale = rule.rationale.format(**situation.facts())
    if action is Action.RETRY and situation.failed_retries > 0 and not situation.rolling_back:
        action, name, rationale = _after_failed_retry(situation)
    return Recommendation(
        action=action,
        rationale=rationale,
        options=options_for(action, situation),
        rule=name,
    )


# -- previews ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepView:
    ordinal: int
    title: str
    status: str  # pending | running | succeeded | failed | skipped


@dataclass(frozen=True)
class LedgerView:
    """One ledger row as the advisor sees it, in ledger (creation) order.

    `compensable`: the tool has a compensating tool. `compensates`: the key of the call this
    row compensates, when it is itself a compensation.
    """

    key: str
    tool: str
    status: str  # pending | succeeded | failed | executed_unknown | compensated
    side_effect: str
    compensable: bool
    compensates: str | None = None


# Statuses as plain strings (the values of agentops.states), so this module imports no Django.
STEP_DONE = frozenset({"succeeded", "skipped"})


@dataclass(frozen=True)
class Preview:
    """The consequences of one option.

    `runs`: steps that will run (the failed one again, then the rest). `skipped`: steps marked
    skipped. `compensated`: effects undone, in the order rollback undoes them. `kept`: effects
    that stay in place. `not_undoable`: effects nothing can undo automatically. `unconfirmed`:
    calls that may or may not have happened.
    """

    option: Action
    runs: tuple[StepView, ...]
    skipped: tuple[StepView, ...]
    compensated: tuple[LedgerView, ...]
    kept: tuple[LedgerView, ...]
    not_undoable: tuple[LedgerView, ...]
    unconfirmed: tuple[LedgerView, ...]
    summary: str


def _effects(ledger: Sequence[LedgerView]) -> list[LedgerView]:
    """Succeeded calls that changed something remotely, compensations excluded."""
    return [
        row
        for row in ledger
        if row.status == "succeeded" and row.side_effect != "read" and row.compensates is None
    ]


def _titles(steps: Sequence[StepView]) -> str:
    return ", ".join(f"{s.ordinal + 1} ({s.title})" for s in steps) or "none"


def _keys(rows: Sequence[LedgerView]) -> str:
    return ", ".join(r.tool for r in rows) or "none"


def preview(
    option: Action | str, steps: Sequence[StepView], ledger: Sequence[LedgerView]
) -> Preview:
    """What choosing `option` would do to a stopped task with these steps and ledger rows.

    `confirm` is a ledger decision, not a run of steps: it is not previewed here.
    """
    option = Action(option)
    if option is Action.CONFIRM:
        raise ValueError("confirm is decided per ledger row: preview retry, skip, rollback, abort")
    ordered = sorted(steps, key=lambda s: s.ordinal)
    open_steps = [s for s in ordered if s.status not in STEP_DONE]
    effects = _effects(ledger)
    not_undoable = tuple(e for e in effects if not e.compensable)
    unconfirmed = tuple(r for r in ledger if r.status == "executed_unknown")
    runs: tuple[StepView, ...] = ()
    skipped: tuple[StepView, ...] = ()
    compensated: tuple[LedgerView, ...] = ()
    kept: tuple[LedgerView, ...] = tuple(effects)
    if option is Action.RETRY:
        runs = tuple(open_steps)
        summary = f"Runs steps {_titles(runs)}; keeps effects: {_keys(kept)}."
    elif option is Action.SKIP:
        skipped = tuple(open_steps[:1])
        runs = tuple(open_steps[1:])
        summary = (
            f"Skips step {_titles(skipped)}, then runs {_titles(runs)}; keeps effects: "
            f"{_keys(kept)}."
        )
    elif option is Action.ROLLBACK:
        compensated = tuple(reversed([e for e in effects if e.compensable]))
        kept = not_undoable
        summary = (
            f"Undoes {_keys(compensated)} (in this order) and ends the task; cannot be "
            f"undone automatically: {_keys(not_undoable)}."
        )
    else:
        summary = f"Ends the task without running anything; effects stay in place: {_keys(kept)}."
    if unconfirmed:
        summary += f" Unconfirmed: {_keys(unconfirmed)}."
    return Preview(
        option=option,
        runs=runs,
        skipped=skipped,
        compensated=compensated,
        kept=kept,
        not_undoable=not_undoable,
        unconfirmed=unconfirmed,
        summary=summary,
    )


def situation_from(
    *,
    failure: Mapping[str, Any],
    side_effect: str | None,
    steps: Sequence[StepView],
    ledger: Sequence[LedgerView],
    step_attempts: int,
    step_retry_cap: int,
    task_recoveries: int,
    task_recovery_cap: int,
    rolling_back: bool = False,
    failed_retries: int = 0,
) -> Situation:
    """Build a Situation from a stored failure (`Task.failure` / `Step.error`) and the views.

    A step stopped at its retry cap is recorded as an orchestration failure carrying the step's
    last failure; the advisor judges that last failure's layer, where the fault actually was.
    """
    effects = _effects(ledger)
    done = sum(1 for s in steps if s.status in STEP_DONE)
    detail = failure.get("detail")
    last = detail.get("last_failure") if isinstance(detail, Mapping) else None
    layer = last.get("layer") if isinstance(last, Mapping) else None
    return Situation(
        kind=str(failure.get("kind") or "unknown"),
        layer=str(layer or failure.get("layer") or "orchestration"),
        side_effect=side_effect,
        progress=done / len(steps) if steps else 0.0,
        step_attempts=step_attempts,
        step_retry_cap=step_retry_cap,
        task_recoveries=task_recoveries,
        task_recovery_cap=task_recovery_cap,
        compensable=any(e.compensable for e in effects),
        irreversible=any(not e.compensable for e in effects),
        rolling_back=rolling_back,
        failed_retries=failed_retries,
    )
