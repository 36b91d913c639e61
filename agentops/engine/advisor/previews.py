"""What each option does to a stopped task (`preview`: the steps that run or are skipped, the
effects compensated, kept or unconfirmed), over the advisor's views of steps and ledger rows, and
the `Situation` those views and a stored failure make (`situation_from`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentops.engine.advisor.situation import Action, Situation
from policies.phrases import Phrase, gettext_noop


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
    if not steps:
        return Phrase(gettext_noop("none"))
    return ", ".join(f"{s.ordinal + 1} ({s.title})" for s in steps)


def _keys(rows: Sequence[LedgerView]) -> str:
    if not rows:
        return Phrase(gettext_noop("none"))
    return ", ".join(r.tool for r in rows)


def preview(
    option: Action | str, steps: Sequence[StepView], ledger: Sequence[LedgerView]
) -> Preview:
    """What choosing `option` would do to a stopped task with these steps and ledger rows.

    `confirm` is a ledger decision, not a run of steps: it is not previewed here. The summary is
    a Phrase: English as a str (a decision's record keeps it), the reader's language on a page.
    """
    option = Action(option)
    if option in (Action.CONFIRM, Action.REPAIR):
        raise ValueError(
            f"{option} is not previewed here (confirm: per ledger row; repair: per change, by "
            "engine/planedit.py): preview retry, skip, rollback, abort"
        )
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
        msgid = gettext_noop("Runs steps %(runs)s; keeps effects: %(kept)s.")
    elif option is Action.GRANT:
        runs = tuple(open_steps)
        msgid = gettext_noop(
            "Grants the missing scope, then runs steps %(runs)s under it; keeps effects: %(kept)s."
        )
    elif option is Action.SKIP:
        skipped = tuple(open_steps[:1])
        runs = tuple(open_steps[1:])
        msgid = gettext_noop("Skips step %(skipped)s, then runs %(runs)s; keeps effects: %(kept)s.")
    elif option is Action.ROLLBACK:
        compensated = tuple(reversed([e for e in effects if e.compensable]))
        kept = not_undoable
        msgid = gettext_noop(
            "Undoes %(compensated)s (in this order) and ends the task; cannot be undone "
            "automatically: %(not_undoable)s."
        )
    else:
        msgid = gettext_noop(
            "Ends the task without running anything; effects stay in place: %(kept)s."
        )
    values = {
        "runs": _titles(runs),
        "skipped": _titles(skipped),
        "kept": _keys(kept),
        "compensated": _keys(compensated),
        "not_undoable": _keys(not_undoable),
    }
    summary = Phrase(msgid, values)
    if unconfirmed:
        summary = Phrase(
            gettext_noop("%(summary)s Unconfirmed: %(unconfirmed)s."),
            {"summary": summary, "unconfirmed": _keys(unconfirmed)},
        )
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
    missing_scope: str | None = None,
    repairable: bool = False,
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
    # A reject loop records how often reviewers rejected the action (engine/gates.py).
    rejections = detail.get("rejections") if isinstance(detail, Mapping) else None
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
        rejected_by_people=rejections if isinstance(rejections, int) else 0,
        missing_scope=missing_scope,
        repairable=repairable and not rolling_back,
    )
