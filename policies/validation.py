"""Validation of a policy's rule list before it may be published: every error and warning, each
naming its rule, and the shadowing analysis (is a rule ever reached?) the editor also uses to
place a new rule where it is reached. Pure, like the evaluator (`policies.engine`), whose rules
and tool facts it reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from policies.engine import (
    APPROVALS_REQUIRED,
    TIMEOUT_ACTIONS,
    Route,
    Rule,
    ToolInfo,
    ValidationMessage,
)
from policies.phrases import Phrase, gettext_noop


def _num(value: float) -> str:
    return f"{value:g}"


def validate(
    rules: Sequence[Rule],
    known_tools: Mapping[str, ToolInfo] | None,
    known_classes: Iterable[str],
    sensitive_systems: Iterable[str] = (),
) -> list[ValidationMessage]:
    """Everything wrong with `rules`, in rule order. `known_tools` None skips the tool-name check
    (no catalog registered); the shadowing check uses the catalog when it has it. Each message
    is a `Phrase`: English, shown in the reader's language on the editor page."""
    classes = set(known_classes)
    sensitive = tuple(sensitive_systems)
    out: list[ValidationMessage] = []
    defaults = [i for i, r in enumerate(rules) if r.is_default]
    if not defaults:
        out.append(
            ValidationMessage(
                "error",
                "missing_default",
                Phrase(
                    gettext_noop(
                        "the policy has no default rule: add a default rule as the last rule"
                    )
                ),
            )
        )
    for i in defaults[:-1]:
        out.append(
            _msg(
                "error",
                "multiple_defaults",
                rules,
                i,
                gettext_noop(
                    "rule %(position)s '%(rule)s' is a second default rule: a policy has exactly "
                    "one default rule"
                ),
            )
        )
    if defaults and defaults[-1] != len(rules) - 1:
        out.append(
            _msg(
                "error",
                "default_not_last",
                rules,
                defaults[-1],
                gettext_noop(
                    "rule %(position)s '%(rule)s' is the default rule and must be the last rule "
                    "(it is rule %(position)s of %(count)s)"
                ),
                count=len(rules),
            )
        )
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        out.extend(_check_rule(rules, i, known_tools, classes, seen))
        seen.add(rule.name)
    for j, later in enumerate(rules):
        if (i := reached_position(rules[:j], later, known_tools, sensitive)) < j:
            text = gettext_noop(
                "rule %(position)s '%(rule)s' is never reached: rule %(earlier_position)s "
                "'%(earlier)s' matches every action it matches"
            )
            out.append(
                _msg(
                    "error",
                    "shadowed",
                    rules,
                    j,
                    text,
                    earlier_position=i + 1,
                    earlier=rules[i].name,
                )
            )
    return sorted(out, key=lambda m: (m.position or 0, m.code))


def reached_position(
    rules: Sequence[Rule], new: Rule, tools: Mapping[str, ToolInfo] | None, sensitive: Sequence[str]
) -> int:
    """The last 0-based place among `rules` where `new` is still reached (first match wins): just
    before the first rule that matches every action it matches, else after the last rule."""
    found = (i for i, r in enumerate(rules) if _superset(r, new, tools, tuple(sensitive)))
    return next(found, len(rules))


def _msg(
    level: str, code: str, rules: Sequence[Rule], i: int, msgid: str, **values: object
) -> ValidationMessage:
    """A message about rule `i`; `msgid` names it as `rule %(position)s '%(rule)s'`."""
    text = Phrase(msgid, {"position": i + 1, "rule": rules[i].name, **values})
    return ValidationMessage(level, code, text, rule=rules[i].name, position=i + 1)


def _check_rule(
    rules: Sequence[Rule],
    i: int,
    known_tools: Mapping[str, ToolInfo] | None,
    classes: set[str],
    seen: set[str],
) -> list[ValidationMessage]:
    rule = rules[i]
    out: list[ValidationMessage] = []

    def error(code: str, msgid: str, **values: object) -> None:
        out.append(_msg("error", code, rules, i, msgid, **values))

    def warning(code: str, msgid: str, **values: object) -> None:
        out.append(_msg("warning", code, rules, i, msgid, **values))

    if not rule.name.strip():
        text = Phrase(gettext_noop("rule %(position)s has no name"), {"position": i + 1})
        out.append(ValidationMessage("error", "empty_name", text, position=i + 1))
    elif rule.name in seen:
        error(
            "duplicate_name",
            gettext_noop(
                "rule %(position)s '%(rule)s' has the same name as an earlier rule: names must "
                "be unique"
            ),
        )
    if rule.route not in Route.values:
        error(
            "invalid_route",
            gettext_noop("rule %(position)s '%(rule)s' has route %(route)s; use one of %(routes)s"),
            route=repr(rule.route),
            routes=", ".join(Route),
        )
    if rule.is_default and rule.has_criteria():
        error(
            "default_has_criteria",
            gettext_noop(
                "rule %(position)s '%(rule)s' is the default rule and matches everything: remove "
                "its criteria"
            ),
        )
    if rule.confidence_below is not None and not _within(rule.confidence_below, 0.0, 1.0):
        error(
            "confidence_out_of_range",
            gettext_noop(
                "rule %(position)s '%(rule)s' has confidence baseline %(value)s, outside [0, 1]"
            ),
            value=_num(rule.confidence_below),
        )
    if rule.amount_above is not None and not _within(rule.amount_above, 0.0, math.inf):
        error(
            "amount_out_of_range",
            gettext_noop(
                "rule %(position)s '%(rule)s' has amount threshold %(value)s, which must be 0 or "
                "more"
            ),
            value=_num(rule.amount_above),
        )
    if rule.sample_rate is not None and not _within(rule.sample_rate, 0.0, 1.0):
        error(
            "sample_rate_out_of_range",
            gettext_noop("rule %(position)s '%(rule)s' has sample rate %(value)s, outside [0, 1]"),
            value=_num(rule.sample_rate),
        )
    if rule.step_at_least is not None and rule.step_at_least < 0:
        error(
            "step_out_of_range",
            gettext_noop(
                "rule %(position)s '%(rule)s' has step at least %(value)s, which must be 0 or more"
            ),
            value=rule.step_at_least,
        )
    if rule.step_at_most is not None and rule.step_at_most < 0:
        error(
            "step_out_of_range",
            gettext_noop(
                "rule %(position)s '%(rule)s' has step at most %(value)s, which must be 0 or more"
            ),
            value=rule.step_at_most,
        )
    if (
        rule.step_at_least is not None
        and rule.step_at_most is not None
        and rule.step_at_least > rule.step_at_most
    ):
        error(
            "step_out_of_range",
            gettext_noop(
                "rule %(position)s '%(rule)s' can never match: step at least %(low)s is above "
                "step at most %(high)s"
            ),
            low=rule.step_at_least,
            high=rule.step_at_most,
        )
    if known_tools is not None:
        for name in rule.tools:
            if name not in known_tools:
                error(
                    "unknown_tool",
                    gettext_noop("rule %(position)s '%(rule)s' names unknown tool %(tool)s"),
                    tool=repr(name),
                )
    for name in rule.side_effects:
        if name not in classes:
            error(
                "unknown_class",
                gettext_noop(
                    "rule %(position)s '%(rule)s' names unknown side-effect class %(name)s; "
                    "known: %(known)s"
                ),
                name=repr(name),
                known=", ".join(sorted(classes)),
            )
    if rule.route == Route.GATE:
        if rule.timeout_seconds is None:
            error(
                "gate_without_timeout",
                gettext_noop("rule %(position)s '%(rule)s' is a gate without a timeout"),
            )
        elif rule.timeout_seconds <= 0:
            error(
                "gate_without_timeout",
                gettext_noop(
                    "rule %(position)s '%(rule)s' has timeout %(seconds)s s, which must be more "
                    "than 0"
                ),
                seconds=rule.timeout_seconds,
            )
        if not rule.approver_group.strip():
            error(
                "gate_without_group",
                gettext_noop("rule %(position)s '%(rule)s' is a gate without an approver group"),
            )
        if rule.timeout_action not in TIMEOUT_ACTIONS:
            error(
                "invalid_timeout_action",
                gettext_noop(
                    "rule %(position)s '%(rule)s' has timeout action %(action)s; use reject or "
                    "escalate"
                ),
                action=repr(rule.timeout_action),
            )
        elif rule.timeout_action == "escalate" and not rule.escalate_to.strip():
            error(
                "escalate_without_group",
                gettext_noop(
                    "rule %(position)s '%(rule)s' escalates on timeout but names no group to "
                    "escalate to"
                ),
            )
    _approval_messages(rule, error, warning)
    if rule.route in (Route.GATE, Route.DENY) and rule.sample_rate:
        warning(
            "sample_rate_ignored",
            gettext_noop(
                "rule %(position)s '%(rule)s' is a %(route)s rule: its sample rate is ignored"
            ),
            route=str(rule.route),
        )
    if rule.route == Route.AUTO and rule.unknown_tool:
        warning(
            "unknown_tool_auto",
            gettext_noop(
                "rule %(position)s '%(rule)s' sends unknown tools to auto, which the engine never "
                "allows: they are gated instead"
            ),
        )
    return out


class _Report(Protocol):
    def __call__(self, code: str, msgid: str, **values: object) -> None: ...


def _approval_messages(rule: Rule, error: _Report, warning: _Report) -> None:
    """Two-person approval: only 1 or 2 approvals, a second group only with 2, on a gate."""
    if rule.approvals_required not in APPROVALS_REQUIRED:
        error(
            "approvals_out_of_range",
            gettext_noop(
                "rule %(position)s '%(rule)s' wants %(count)s approvals; use 1 or 2 (two "
                "different people)"
            ),
            count=rule.approvals_required,
        )
    elif rule.route != Route.GATE and rule.approvals_required != 1:
        warning(
            "approvals_ignored",
            gettext_noop(
                "rule %(position)s '%(rule)s' is a %(route)s rule: only a gate asks for "
                "approvals, so 2 is ignored"
            ),
            route=str(rule.route),
        )
    elif rule.approvals_required == 1 and rule.second_approver_group.strip():
        warning(
            "second_group_ignored",
            gettext_noop(
                "rule %(position)s '%(rule)s' names a second approver group but wants one "
                "approval: the group is ignored"
            ),
        )


def _within(value: float, low: float, high: float) -> bool:
    return not math.isnan(value) and low <= value <= high


def _tool_facts(rule: Rule, known_tools: Mapping[str, ToolInfo] | None) -> list[ToolInfo] | None:
    """What the catalog says about the tools `rule` is limited to, if it knows all of them."""
    if not rule.tools or known_tools is None or rule.unknown_tool:
        return None
    if any(name not in known_tools for name in rule.tools):
        return None
    return [known_tools[name] for name in rule.tools]


def _superset(
    earlier: Rule,
    later: Rule,
    known_tools: Mapping[str, ToolInfo] | None,
    sensitive: tuple[str, ...],
) -> bool:
    """Conservatively: does every action `later` matches also match `earlier`? A False may be a
    missed overlap; a True is always right, so a `shadowed` message is never a false alarm."""
    if earlier.is_default or not earlier.has_criteria():
        return True
    if later.is_default or not later.has_criteria():
        return False
    facts = _tool_facts(later, known_tools)

    def covered_systems(allowed: Iterable[str], own: tuple[str, ...]) -> bool:
        allowed = set(allowed)
        if own and set(own) <= allowed:
            return True
        return facts is not None and all(set(f.systems) & allowed for f in facts)

    checks = [
        not earlier.unknown_tool or later.unknown_tool,
        not earlier.tools or (bool(later.tools) and set(later.tools) <= set(earlier.tools)),
        not earlier.side_effects
        or (
            not later.unknown_tool
            and (
                (bool(later.side_effects) and set(later.side_effects) <= set(earlier.side_effects))
                or (facts is not None and all(f.side_effect in earlier.side_effects for f in facts))
            )
        ),
        not earlier.systems or covered_systems(earlier.systems, later.systems),
        not earlier.touches_sensitive
        or later.touches_sensitive
        or covered_systems(sensitive, later.systems),
        earlier.amount_above is None
        or (later.amount_above is not None and later.amount_above >= earlier.amount_above),
        earlier.confidence_below is None
        or (
            later.confidence_below is not None
            and later.confidence_below <= earlier.confidence_below
        ),
        not earlier.agents or (bool(later.agents) and set(later.agents) <= set(earlier.agents)),
        earlier.step_at_least is None
        or (later.step_at_least is not None and later.step_at_least >= earlier.step_at_least),
        earlier.step_at_most is None
        or (later.step_at_most is not None and later.step_at_most <= earlier.step_at_most),
        earlier.edited is None or later.edited == earlier.edited,
    ]
    return all(checks)
