"""A task's plan: its dependency order (which step runs next, and what a skipped step blocks).

Pure Python over `Step` rows already loaded (no queries); asking the model for a plan is
`proposals.plan_propose`. A step runs only when every step it depends on (`Step.depends_on`,
ordinals) has succeeded; a step whose dependency was skipped can never get that dependency's
output, so skipping a step skips its dependants too (transitively), and the recovery preview
names them. A plan's dependencies point at earlier
ordinals only, so running open steps in ordinal order never runs a step before its dependencies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from agentops.engine.advisor import Preview
from agentops.states import STEP_DONE, StepStatus
from policies.phrases import Phrase, gettext_noop


class PlannedStep(Protocol):
    ordinal: int
    status: str
    depends_on: list[int]


S = TypeVar("S", bound=PlannedStep)


class PlanInvalid(ValueError):
    """A plan whose dependencies name a step that is not earlier in the plan."""


def plan_check(depends: Sequence[Iterable[int]]) -> None:
    """Raise PlanInvalid unless every step depends only on earlier steps of the plan."""
    for ordinal, deps in enumerate(depends):
        for dep in deps:
            if not isinstance(dep, int) or not 0 <= dep < ordinal:
                named = dep + 1 if isinstance(dep, int) else dep
                raise PlanInvalid(
                    f"step {ordinal + 1} depends on step {named}, which is not an earlier step "
                    "of the plan"
                )


def ready(step: PlannedStep, by_ordinal: dict[int, PlannedStep]) -> bool:
    """True when every dependency of `step` has succeeded."""
    return all(
        dep in by_ordinal and by_ordinal[dep].status == StepStatus.SUCCEEDED
        for dep in step.depends_on or ()
    )


def blocked_by(step: PlannedStep, by_ordinal: dict[int, PlannedStep]) -> list[int]:
    """The dependencies of `step` that have not succeeded (ordinals)."""
    return [
        dep
        for dep in step.depends_on or ()
        if dep not in by_ordinal or by_ordinal[dep].status != StepStatus.SUCCEEDED
    ]


def next_open_step(steps: Sequence[S], *, after: int = -1) -> S | None:
    """The first step after ordinal `after` that is not done, in ordinal order.

    With dependencies on earlier steps only, this step's dependencies are done or skipped; a
    skipped dependency has already skipped it (`dependants`), so it is runnable."""
    return next((s for s in steps if s.ordinal > after and s.status not in STEP_DONE), None)


def dependants(steps: Sequence[PlannedStep], ordinal: int) -> list[int]:
    """Ordinals of the steps that depend on step `ordinal`, directly or through others."""
    found: set[int] = {ordinal}
    for step in sorted(steps, key=lambda s: s.ordinal):
        if step.ordinal > ordinal and found.intersection(step.depends_on or ()):
            found.add(step.ordinal)
    found.discard(ordinal)
    return sorted(found)


def preview_skip_with_dependants(
    skip: Preview, steps: Sequence[PlannedStep], ordinal: int
) -> Preview:
    """The advisor's skip preview, corrected for dependencies: the steps that depend on the
    skipped one are skipped too, not run, and the summary says why."""
    blocked = set(dependants(steps, ordinal))
    if not blocked:
        return skip
    skipped = skip.skipped + tuple(s for s in skip.runs if s.ordinal in blocked)
    runs = tuple(s for s in skip.runs if s.ordinal not in blocked)

    def titles(views: Iterable[Any]) -> str:
        named = ", ".join(f"{v.ordinal + 1} '{v.title}'" for v in views)
        return named or Phrase(gettext_noop("nothing"))

    kept = ", ".join(e.key for e in skip.kept) or Phrase(gettext_noop("none"))
    # A Phrase, as the advisor's previews: English as a str, the reader's language on a page.
    summary = Phrase(
        gettext_noop(
            "Skips step %(skipped)s and the steps that depend on it, %(dependants)s; then runs "
            "%(runs)s; keeps effects: %(kept)s."
        ),
        {
            "skipped": titles(skip.skipped),
            "dependants": titles(skipped[len(skip.skipped) :]),
            "runs": titles(runs),
            "kept": kept,
        },
    )
    return replace(skip, skipped=skipped, runs=runs, summary=summary)
