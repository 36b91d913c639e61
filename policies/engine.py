"""The pure policy evaluator: which lane an action proposed by an agent takes.

Frozen dataclasses in, a verdict out; nothing here touches the database, the clock or randomness, so
a recorded decision can always be replayed. Rules are ordered tiers and the first match wins; the
default rule is mandatory and last; an unknown tool (no side-effect class) is never `auto`.
`validate` checks a rule list before it may be published and `sampled` decides audit sampling from a
stable digest of a key, never from Python's `hash()`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import EnumType, StrEnum
from typing import Any


class _Choices(EnumType):
    """Django's `choices` and `values` on a plain str enum, so the evaluator's `Route` is the
    model's, the form's and the API's too while this module imports nothing of Django."""

    @property
    def choices(cls) -> list[tuple[str, str]]:
        return [(value, value) for value in cls.values]

    @property
    def values(cls) -> list[str]:
        members: dict[str, StrEnum] = dict(cls.__members__)
        return [member.value for member in members.values()]


class Route(StrEnum, metaclass=_Choices):
    """The lane an action takes, in order of how freely it runs: the one list of routes (the
    evaluator, `PolicyRule.route`, the forms and the API use it; stored as these strings)."""

    AUTO = "auto"
    AUDIT = "audit"
    GATE = "gate"
    DENY = "deny"


# The routes in lane order (Route's members), for callers that iterate or sample them.
ROUTES: tuple[Route, ...] = tuple(Route)
# The lanes whose calls run at once (an audit looks at them afterwards).
RUNS_NOW = frozenset({Route.AUTO, Route.AUDIT})
TIMEOUT_ACTIONS = ("reject", "escalate")


@dataclass(frozen=True)
class GateSettings:
    """Who decides a gate a rule opens and what happens when nobody does in time: the approver
    group, the timeout (None: the engine's default), the timeout action (`reject` or `escalate`)
    and the group it escalates to. It travels unchanged from the rule to the `Gate` row
    (`agentops.engine.gates.gate_open` fills an empty field with the engine's default)."""

    approver_group: str = ""
    timeout_seconds: int | None = None
    timeout_action: str = "reject"
    escalate_to: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The settings as JSON (a verdict's record, the `policy` command's output)."""
        return asdict(self)


# Used when an unknown tool is forced out of `auto` and the policy's default rule is no gate.
FALLBACK_GATE = GateSettings(
    approver_group="operators", timeout_seconds=3600, timeout_action="reject", escalate_to=""
)


@dataclass(frozen=True)
class Action:
    """What the agent proposes to do, as the policy sees it.

    `side_effect` is None when the tool is not in the catalog (an unknown tool); `amount` and
    `confidence` are None when unknown, and a threshold criterion never matches an unknown value.
    """

    tool: str
    side_effect: str | None
    systems: tuple[str, ...] = ()
    amount: float | None = None
    confidence: float | None = None
    agent: str = ""
    step: int = 0
    edited: bool = False


@dataclass(frozen=True)
class Rule:
    """One tier. Every criterion that is set must hold (AND); a list criterion holds when any of
    its values does (OR). A rule with no criteria at all matches every action.

    `sample_rate` is the share of matched decisions also queued for audit: None means the route's
    default (1.0 for `audit`, 0.0 for `auto`); it is ignored for `gate` and `deny`.
    """

    name: str
    route: str
    tools: tuple[str, ...] = ()
    side_effects: tuple[str, ...] = ()
    systems: tuple[str, ...] = ()
    touches_sensitive: bool = False
    amount_above: float | None = None
    confidence_below: float | None = None
    agents: tuple[str, ...] = ()
    step_at_least: int | None = None
    step_at_most: int | None = None
    edited: bool | None = None
    unknown_tool: bool = False
    is_default: bool = False
    sample_rate: float | None = None
    approver_group: str = ""
    timeout_seconds: int | None = None
    timeout_action: str = "reject"
    escalate_to: str = ""

    def has_criteria(self) -> bool:
        return bool(
            self.tools
            or self.side_effects
            or self.systems
            or self.touches_sensitive
            or self.amount_above is not None
            or self.confidence_below is not None
            or self.agents
            or self.step_at_least is not None
            or self.step_at_most is not None
            or self.edited is not None
            or self.unknown_tool
        )

    def effective_sample_rate(self) -> float:
        if self.route not in RUNS_NOW:
            return 0.0
        if self.sample_rate is None:
            return 1.0 if self.route == Route.AUDIT else 0.0
        return min(max(float(self.sample_rate), 0.0), 1.0)

    def gate_settings(self) -> GateSettings:
        return GateSettings(
            approver_group=self.approver_group,
            timeout_seconds=self.timeout_seconds,
            timeout_action=self.timeout_action,
            escalate_to=self.escalate_to,
        )

    def describe(self) -> str:
        """The rule's criteria in words, for pages, diffs and reasons."""
        if self.is_default:
            return "every action (default)"
        parts = []
        if self.unknown_tool:
            parts.append("the tool is not in the catalog")
        if self.tools:
            parts.append(f"tool in {', '.join(self.tools)}")
        if self.side_effects:
            parts.append(f"side effect in {', '.join(self.side_effects)}")
        if self.systems:
            parts.append(f"touches any of {', '.join(self.systems)}")
        if self.touches_sensitive:
            parts.append("touches a sensitive system")
        if self.amount_above is not None:
            parts.append(f"amount above {_num(self.amount_above)}")
        if self.confidence_below is not None:
            parts.append(f"confidence below {_num(self.confidence_below)}")
        if self.agents:
            parts.append(f"agent in {', '.join(self.agents)}")
        if self.step_at_least is not None:
            parts.append(f"step index at least {self.step_at_least}")
        if self.step_at_most is not None:
            parts.append(f"step index at most {self.step_at_most}")
        if self.edited is not None:
            parts.append("arguments edited by a human" if self.edited else "arguments not edited")
        return " and ".join(parts) or "every action"


@dataclass(frozen=True)
class PolicySpec:
    """An ordered rule list with the systems it treats as sensitive.

    `version` is the published version number (None for a draft); `version_id` the database id
    of the version it was built from, if any.
    """

    version: int | None
    rules: tuple[Rule, ...]
    sensitive_systems: tuple[str, ...] = ()
    version_id: int | None = None
    policy: str = "default"


@dataclass(frozen=True)
class Verdict:
    """The lane for one action and why. `gate` holds the gate settings when route is `gate`."""

    route: str
    rule: str
    reasons: tuple[str, ...]
    version: int | None
    sample_rate: float = 0.0
    gate: GateSettings | None = None
    version_id: int | None = None

    def queues_audit(self, key: str) -> bool:
        """Whether this decision also gets an audit item; deterministic in `key` (a step id)."""
        return self.route in RUNS_NOW and sampled(self.sample_rate, key)

    def as_dict(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "rule": self.rule,
            "reasons": list(self.reasons),
            "version": self.version,
            "version_id": self.version_id,
            "sample_rate": self.sample_rate,
            "gate": self.gate.as_dict() if self.gate is not None else None,
        }


@dataclass(frozen=True)
class ValidationMessage:
    """One finding of `validate`. Errors block publishing; warnings do not."""

    level: str
    code: str
    message: str
    rule: str | None = None
    position: int | None = None

    @property
    def is_error(self) -> bool:
        return self.level == "error"


@dataclass(frozen=True)
class ToolInfo:
    side_effect: str
    systems: tuple[str, ...] = field(default_factory=tuple)


def _num(value: float) -> str:
    return f"{value:g}"


def sampled(sample_rate: float, key: str) -> bool:
    """True for a stable share `sample_rate` of keys: the same key always gives the same answer,
    and a key sampled at some rate is sampled at every higher rate."""
    if sample_rate <= 0:
        return False
    if sample_rate >= 1:
        return True
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < sample_rate


def matches(rule: Rule, action: Action, sensitive_systems: Iterable[str] = ()) -> bool:
    return not _mismatch(rule, action, tuple(sensitive_systems))


def _mismatch(rule: Rule, action: Action, sensitive: tuple[str, ...]) -> bool:
    if rule.is_default:
        return False
    return (
        (rule.unknown_tool and action.side_effect is not None)
        or (bool(rule.tools) and action.tool not in rule.tools)
        or (bool(rule.side_effects) and action.side_effect not in rule.side_effects)
        or (bool(rule.systems) and not set(action.systems) & set(rule.systems))
        or (rule.touches_sensitive and not set(action.systems) & set(sensitive))
        or (
            rule.amount_above is not None
            and (action.amount is None or not action.amount > rule.amount_above)
        )
        or (
            rule.confidence_below is not None
            and (action.confidence is None or not action.confidence < rule.confidence_below)
        )
        or (bool(rule.agents) and action.agent not in rule.agents)
        or (rule.step_at_least is not None and action.step < rule.step_at_least)
        or (rule.step_at_most is not None and action.step > rule.step_at_most)
        or (rule.edited is not None and action.edited != rule.edited)
    )


def _why(rule: Rule, action: Action, sensitive: tuple[str, ...]) -> list[str]:
    """The facts of `action` that made `rule` match, one per criterion."""
    if rule.is_default:
        return ["no earlier rule matched: the default rule applies"]
    why = []
    if rule.unknown_tool:
        why.append(f"tool {action.tool} is not in the tool catalog")
    if rule.tools:
        why.append(f"tool is {action.tool}")
    if rule.side_effects:
        why.append(f"tool {action.tool} has side effect {action.side_effect}")
    if rule.systems:
        hit = sorted(set(action.systems) & set(rule.systems))
        why.append(f"touches {', '.join(hit)}")
    if rule.touches_sensitive:
        hit = sorted(set(action.systems) & set(sensitive))
        why.append(f"touches sensitive system {', '.join(hit)}")
    if rule.amount_above is not None and action.amount is not None:
        why.append(f"amount {_num(action.amount)} is above {_num(rule.amount_above)}")
    if rule.confidence_below is not None and action.confidence is not None:
        why.append(f"confidence {_num(action.confidence)} is below {_num(rule.confidence_below)}")
    if rule.agents:
        why.append(f"agent is {action.agent}")
    if rule.step_at_least is not None or rule.step_at_most is not None:
        why.append(f"step index is {action.step}")
    if rule.edited is not None:
        why.append("arguments were edited by a human" if rule.edited else "arguments not edited")
    return why or ["the rule has no criteria: it matches every action"]


def evaluate(spec: PolicySpec, action: Action) -> Verdict:
    """Route `action` by the first rule of `spec` that matches it.

    Guarantees: the verdict names a rule of `spec`; an unknown tool is never `auto` (a matching
    `auto` rule becomes a gate, with a reason saying so); a spec with no matching rule (no
    default, so never published) gates the action rather than letting it through.
    """
    sensitive = tuple(spec.sensitive_systems)
    for position, rule in enumerate(spec.rules, start=1):
        if _mismatch(rule, action, sensitive):
            continue
        reasons = [f"rule {position} '{rule.name}' is the first that matches"]
        reasons.extend(_why(rule, action, sensitive))
        route = rule.route
        gate = rule.gate_settings() if route == Route.GATE else None
        sample_rate = rule.effective_sample_rate()
        if route == Route.AUTO and action.side_effect is None:
            reasons.append(
                f"tool {action.tool} is not in the tool catalog, and an unknown tool is never "
                "auto: gated instead"
            )
            route, sample_rate, gate = Route.GATE, 0.0, _fallback_gate(spec)
        return Verdict(
            route=route,
            rule=rule.name,
            reasons=tuple(reasons),
            version=spec.version,
            sample_rate=sample_rate,
            gate=gate,
            version_id=spec.version_id,
        )
    return Verdict(
        route=Route.GATE,
        rule="(no rule matched)",
        reasons=("no rule matched and the policy has no default rule: gated",),
        version=spec.version,
        gate=_fallback_gate(spec),
        version_id=spec.version_id,
    )


def _fallback_gate(spec: PolicySpec) -> GateSettings:
    default = next((r for r in spec.rules if r.is_default and r.route == Route.GATE), None)
    return default.gate_settings() if default is not None else FALLBACK_GATE


# -- validation -----------------------------------------------------------------------------------


def validate(
    rules: Sequence[Rule],
    known_tools: Mapping[str, ToolInfo] | None,
    known_classes: Iterable[str],
    sensitive_systems: Iterable[str] = (),
) -> list[ValidationMessage]:
    """Everything wrong with `rules`, in rule order. `known_tools` None skips the tool-name check
    (no catalog registered); the shadowing check uses the catalog when it has it."""
    classes = set(known_classes)
    sensitive = tuple(sensitive_systems)
    out: list[ValidationMessage] = []
    defaults = [i for i, r in enumerate(rules) if r.is_default]
    if not defaults:
        out.append(
            ValidationMessage(
                "error",
                "missing_default",
                "the policy has no default rule: add a default rule as the last rule",
            )
        )
    for i in defaults[:-1]:
        out.append(
            _msg(
                "error",
                "multiple_defaults",
                rules,
                i,
                "is a second default rule: a policy has exactly one default rule",
            )
        )
    if defaults and defaults[-1] != len(rules) - 1:
        out.append(
            _msg(
                "error",
                "default_not_last",
                rules,
                defaults[-1],
                f"is the default rule and must be the last rule (it is rule {defaults[-1] + 1} of "
                f"{len(rules)})",
            )
        )
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        out.extend(_check_rule(rules, i, known_tools, classes, seen))
        seen.add(rule.name)
    for j, later in enumerate(rules):
        if (i := reached_position(rules[:j], later, known_tools, sensitive)) < j:
            text = (
                f"is never reached: rule {i + 1} '{rules[i].name}' matches every action it matches"
            )
            out.append(_msg("error", "shadowed", rules, j, text))
    return sorted(out, key=lambda m: (m.position or 0, m.code))


def reached_position(
    rules: Sequence[Rule], new: Rule, tools: Mapping[str, ToolInfo] | None, sensitive: Sequence[str]
) -> int:
    """The last 0-based place among `rules` where `new` is still reached (first match wins): just
    before the first rule that matches every action it matches, else after the last rule."""
    found = (i for i, r in enumerate(rules) if _superset(r, new, tools, tuple(sensitive)))
    return next(found, len(rules))


def _msg(level: str, code: str, rules: Sequence[Rule], i: int, text: str) -> ValidationMessage:
    return ValidationMessage(
        level, code, f"rule {i + 1} '{rules[i].name}' {text}", rule=rules[i].name, position=i + 1
    )


def _check_rule(
    rules: Sequence[Rule],
    i: int,
    known_tools: Mapping[str, ToolInfo] | None,
    classes: set[str],
    seen: set[str],
) -> list[ValidationMessage]:
    rule = rules[i]
    out: list[ValidationMessage] = []

    def error(code: str, text: str) -> None:
        out.append(_msg("error", code, rules, i, text))

    def warning(code: str, text: str) -> None:
        out.append(_msg("warning", code, rules, i, text))

    if not rule.name.strip():
        out.append(
            ValidationMessage("error", "empty_name", f"rule {i + 1} has no name", position=i + 1)
        )
    elif rule.name in seen:
        error("duplicate_name", "has the same name as an earlier rule: names must be unique")
    if rule.route not in Route.values:
        error("invalid_route", f"has route {rule.route!r}; use one of {', '.join(Route)}")
    if rule.is_default and rule.has_criteria():
        error(
            "default_has_criteria",
            "is the default rule and matches everything: remove its criteria",
        )
    if rule.confidence_below is not None and not _within(rule.confidence_below, 0.0, 1.0):
        error(
            "confidence_out_of_range",
            f"has confidence baseline {_num(rule.confidence_below)}, outside [0, 1]",
        )
    if rule.amount_above is not None and not _within(rule.amount_above, 0.0, math.inf):
        error(
            "amount_out_of_range",
            f"has amount threshold {_num(rule.amount_above)}, which must be 0 or more",
        )
    if rule.sample_rate is not None and not _within(rule.sample_rate, 0.0, 1.0):
        error(
            "sample_rate_out_of_range", f"has sample rate {_num(rule.sample_rate)}, outside [0, 1]"
        )
    for label, value in (
        ("step_at_least", rule.step_at_least),
        ("step_at_most", rule.step_at_most),
    ):
        if value is not None and value < 0:
            error(
                "step_out_of_range",
                f"has {label.replace('_', ' ')} {value}, which must be 0 or more",
            )
    if (
        rule.step_at_least is not None
        and rule.step_at_most is not None
        and rule.step_at_least > rule.step_at_most
    ):
        error(
            "step_out_of_range",
            f"can never match: step at least {rule.step_at_least} is "
            f"above step at most {rule.step_at_most}",
        )
    if known_tools is not None:
        for name in rule.tools:
            if name not in known_tools:
                error("unknown_tool", f"names unknown tool {name!r}")
    for name in rule.side_effects:
        if name not in classes:
            error(
                "unknown_class",
                f"names unknown side-effect class {name!r}; known: {', '.join(sorted(classes))}",
            )
    if rule.route == Route.GATE:
        if rule.timeout_seconds is None:
            error("gate_without_timeout", "is a gate without a timeout")
        elif rule.timeout_seconds <= 0:
            error(
                "gate_without_timeout",
                f"has timeout {rule.timeout_seconds} s, which must be more than 0",
            )
        if not rule.approver_group.strip():
            error("gate_without_group", "is a gate without an approver group")
        if rule.timeout_action not in TIMEOUT_ACTIONS:
            error(
                "invalid_timeout_action",
                f"has timeout action {rule.timeout_action!r}; use reject or escalate",
            )
        elif rule.timeout_action == "escalate" and not rule.escalate_to.strip():
            error(
                "escalate_without_group", "escalates on timeout but names no group to escalate to"
            )
    if rule.route in (Route.GATE, Route.DENY) and rule.sample_rate:
        warning("sample_rate_ignored", f"is a {rule.route} rule: its sample rate is ignored")
    if rule.route == Route.AUTO and rule.unknown_tool:
        warning(
            "unknown_tool_auto",
            "sends unknown tools to auto, which the engine never allows: they are gated instead",
        )
    return out


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
