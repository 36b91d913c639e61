"""The recovery advisor's recommendation for a `Situation`: the first matching row of `RULES`,
one rationale, and the options a person may choose (the recommended one first).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentops.engine.advisor.rules import RULES
from agentops.engine.advisor.situation import Action, Band, Situation
from policies.phrases import Phrase, gettext_noop


@dataclass(frozen=True)
class Recommendation:
    """The advised action, why (one line), the actions a person may choose, and the row used.
    `rationale` is a Phrase: English as a str, the reader's language on a page."""

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
    if action is Action.REPAIR:
        offered = [Action.RETRY, Action.SKIP, Action.ROLLBACK, Action.ABORT]
        if not situation.compensable:
            offered.remove(Action.ROLLBACK)
        return (Action.REPAIR, *offered)
    if situation.rolling_back:
        return (Action.ROLLBACK, Action.ABORT)
    offered = [Action.RETRY, Action.SKIP, Action.ROLLBACK, Action.ABORT]
    if action is Action.GRANT:
        offered.insert(0, Action.GRANT)
    if not situation.compensable:
        offered.remove(Action.ROLLBACK)
    return (action, *[a for a in offered if a is not action])


def _counted(times: int, one: str, many: str, facts: dict[str, object]) -> Phrase:
    """`one` or `many` by `times` (both whole sentences in the catalogue: Chinese, the other
    language, has a single form)."""
    return Phrase(one if times == 1 else many, {**facts, "times": times})


def _after_failed_retry(situation: Situation) -> tuple[Action, str, Phrase]:
    """What to recommend instead of a retry that a person already tried and that failed the same
    way: undo when everything can be undone, skip a late read or notification, else abort (or
    escalate the cause first)."""
    times = situation.failed_retries
    facts: dict[str, object] = {"kind": situation.kind.replace("_", " ")}
    if situation.compensable and not situation.irreversible:
        return (
            Action.ROLLBACK,
            "retry-failed-undo",
            _counted(
                times,
                gettext_noop(
                    "A manual retry already failed the same way (%(kind)s, %(times)s time); "
                    "another retry would likely fail again. Undo the effects so far and end it."
                ),
                gettext_noop(
                    "A manual retry already failed the same way (%(kind)s, %(times)s times); "
                    "another retry would likely fail again. Undo the effects so far and end it."
                ),
                facts,
            ),
        )
    if situation.side_effect in {"read", "notify"} and situation.band is Band.LATE:
        return (
            Action.SKIP,
            "retry-failed-skip",
            _counted(
                times,
                gettext_noop(
                    "A manual retry already failed the same way (%(kind)s, %(times)s time); "
                    "another retry would likely fail again. Skip the step and do it by hand."
                ),
                gettext_noop(
                    "A manual retry already failed the same way (%(kind)s, %(times)s times); "
                    "another retry would likely fail again. Skip the step and do it by hand."
                ),
                facts,
            ),
        )
    return (
        Action.ABORT,
        "retry-failed",
        _counted(
            times,
            gettext_noop(
                "A manual retry already failed the same way (%(kind)s, %(times)s time); another "
                "retry would likely fail again. Escalate the cause to the service's owner, or "
                "abort."
            ),
            gettext_noop(
                "A manual retry already failed the same way (%(kind)s, %(times)s times); another "
                "retry would likely fail again. Escalate the cause to the service's owner, or "
                "abort."
            ),
            facts,
        ),
    )


def _after_people_rejected(situation: Situation) -> tuple[Action, str, Phrase]:
    """What to recommend instead of a retry when reviewers rejected the step's action again and
    again: a retry has the agent propose it once more, against the people who said no. Undo when
    everything can be undone, else abort."""
    times = situation.rejected_by_people
    if situation.compensable and not situation.irreversible:
        return (
            Action.ROLLBACK,
            "people-rejected-undo",
            _counted(
                times,
                gettext_noop(
                    "Reviewers rejected this action %(times)s time; a retry would have the agent "
                    "propose it again. Undo the effects so far and end it."
                ),
                gettext_noop(
                    "Reviewers rejected this action %(times)s times; a retry would have the agent "
                    "propose it again. Undo the effects so far and end it."
                ),
                {},
            ),
        )
    return (
        Action.ABORT,
        "people-rejected",
        _counted(
            times,
            gettext_noop(
                "Reviewers rejected this action %(times)s time; a retry would have the agent "
                "propose it again. Abort, or edit the step's instructions first if the task "
                "should go on."
            ),
            gettext_noop(
                "Reviewers rejected this action %(times)s times; a retry would have the agent "
                "propose it again. Abort, or edit the step's instructions first if the task "
                "should go on."
            ),
            {},
        ),
    )


def advise(situation: Situation) -> Recommendation:
    """The first row of `RULES` that matches `situation`, as a recommendation; a retry that a
    person already tried and that failed the same way, or whose action reviewers kept
    rejecting, is not recommended again."""
    rule = next(r for r in RULES if r.matches(situation))
    action, name = rule.action, rule.name
    rationale = Phrase(rule.rationale, {**situation.facts(), **dict(rule.quoted)})
    if action in (Action.RETRY, Action.REPAIR) and not situation.rolling_back:
        # Reviewers said no to this action: neither a retry nor a repair (which would have the
        # agent propose again) is advised against them.
        if situation.rejected_by_people > 0:
            action, name, rationale = _after_people_rejected(situation)
        elif situation.failed_retries > 0 and action is Action.RETRY:
            action, name, rationale = _after_failed_retry(situation)
    return Recommendation(
        action=action,
        rationale=rationale,
        options=options_for(action, situation),
        rule=name,
    )


# -- previews ----------------------------------------------------------------------------------
