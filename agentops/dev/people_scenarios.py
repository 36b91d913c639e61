"""The scenarios in which people act, by name, for `demo_scenario`: each runs with the stack's
worker and sweeper, a web process for the people's API calls, and the people of
`agentops.dev.people`, and returns its figures (`task_status` first among them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentops.dev.again import run_fork, run_restart
from agentops.dev.devstack import Stack
from agentops.dev.four_eyes import run_four_eyes
from agentops.dev.people import CAST, Api, Person, Wait, people, web
from agentops.dev.rubric_review import CAST as RUBRIC_CAST
from agentops.dev.rubric_review import run_rubric_review


@dataclass(frozen=True)
class PeopleScenario:
    name: str
    description: str
    run: Callable[..., dict[str, Any]]
    # The people who act: username -> their groups.
    cast: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: CAST)


PEOPLE_SCENARIOS: dict[str, PeopleScenario] = {
    s.name: s
    for s in [
        PeopleScenario(
            "four-eyes",
            "A 108 EUR refund needs two approvers, one a finance lead: the starter is refused, "
            "the first approval shows 1 of 2, the finance leads are told, an edit starts over, "
            "the second approval runs the refund once.",
            run_four_eyes,
        ),
        PeopleScenario(
            "restart",
            "A trip stops half done (the hotel refuses once); an operator starts it again with "
            "an edited input, aborting the old one; the new task succeeds and both link.",
            run_restart,
        ),
        PeopleScenario(
            "fork",
            "A refund succeeds; an operator forks it from step 5 (the email) with an edited "
            "input: steps 1 to 4 are referenced, not run again (effects_repeated 0).",
            run_fork,
        ),
        PeopleScenario(
            "rubric-review",
            "Four refunds' audit items answered with a rubric by two (refunds) and three (emails) "
            "independent auditors; disagreements settled by a senior auditor; the agreement per "
            "rubric item (Cohen's kappa, Krippendorff's alpha).",
            run_rubric_review,
            cast=RUBRIC_CAST,
        ),
    ]
}


def people_scenario_run(name: str, *, stack: Stack, wait: Wait, timeout: float) -> dict[str, Any]:
    """Run scenario `name` with its people over the API; its figures."""
    scenario = PEOPLE_SCENARIOS[name]
    cast: dict[str, Person]
    api: Api
    with people(scenario.cast) as cast, web(stack) as api:
        return {"scenario": name, **scenario.run(api=api, cast=cast, wait=wait, timeout=timeout)}
