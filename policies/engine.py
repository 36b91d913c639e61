"""The pure policy evaluator: which lane an action proposed by an agent takes.

Frozen dataclasses in, a verdict out; nothing here touches the database, the clock or randomness, so
a recorded decision can always be replayed. Rules are ordered tiers and the first match wins; the
default rule is mandatory and last; an unknown tool (no side-effect class) is never `auto`.
`sampled` decides audit sampling from a stable digest of a key, never from Python's `hash()`. The
checks of a rule list before it may be published are `policies.validation.validate`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import EnumType, StrEnum
from typing import Any

from policies.phrases import Phrase, gettext_noop


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
# How many different people must approve a gate: one, or two (four eyes).
APPROVALS_REQUIRED = (1, 2)


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
    # Two-person approval (four eyes): 2 wants a second, different person's approval, of
    # `second_approver_group` (empty: the approver group again) before the action runs.
    approvals_required: int = 1
    second_approver_group: str = ""
    # The gate's approval kind by name (`agentops.engine.approvals`); empty: by
    # `approvals_required`. No rule sets it: the engine does, for an agent's question.
    approval_kind: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The settings as JSON (a verdict's record, the `policy` command's output, a rule's
        fields); an empty approval kind is left out, as no rule has one."""
        fields = asdict(self)
        if not self.approval_kind:
            del fields["approval_kind"]
        return fields


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
    approvals_required: int = 1
    second_approver_group: str = ""

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
            approvals_required=self.approvals_required,
            second_approver_group=self.second_approver_group,
        )

    def describe(self) -> str:
        """The rule's criteria in words, for pages and diffs (a `Phrase`: English, shown in the
        reader's language)."""
        if self.is_default:
            return Phrase(gettext_noop("every action (default)"))
        parts: list[Phrase] = []

        def part(msgid: str, **values: object) -> None:
            parts.append(Phrase(msgid, values))

        if self.unknown_tool:
            part(gettext_noop("the tool is not in the catalog"))
        if self.tools:
            part(gettext_noop("tool in %(tools)s"), tools=", ".join(self.tools))
        if self.side_effects:
            part(gettext_noop("side effect in %(classes)s"), classes=", ".join(self.side_effects))
        if self.systems:
            part(gettext_noop("touches any of %(systems)s"), systems=", ".join(self.systems))
        if self.touches_sensitive:
            part(gettext_noop("touches a sensitive system"))
        if self.amount_above is not None:
            part(gettext_noop("amount above %(amount)s"), amount=_num(self.amount_above))
        if self.confidence_below is not None:
            part(gettext_noop("confidence below %(value)s"), value=_num(self.confidence_below))
        if self.agents:
            part(gettext_noop("agent in %(agents)s"), agents=", ".join(self.agents))
        if self.step_at_least is not None:
            part(gettext_noop("step index at least %(step)s"), step=self.step_at_least)
        if self.step_at_most is not None:
            part(gettext_noop("step index at most %(step)s"), step=self.step_at_most)
        if self.edited is not None:
            if self.edited:
                part(gettext_noop("arguments edited by a human"))
            else:
                part(gettext_noop("arguments not edited"))
        if not parts:
            return Phrase(gettext_noop("every action"))
        described = parts[0]
        for criterion in parts[1:]:
            described = Phrase(
                gettext_noop("%(criteria)s and %(criterion)s"),
                {"criteria": described, "criterion": criterion},
            )
        return described


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
