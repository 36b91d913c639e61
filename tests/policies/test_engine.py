"""The pure evaluator: tables over the shipped default policy, properties over random policies,
validation messages, sampling."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError, replace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies.defaults import DEFAULT_RULES, DEFAULT_SENSITIVE_SYSTEMS
from policies.engine import (
    ROUTES,
    Action,
    GateSettings,
    PolicySpec,
    Rule,
    ToolInfo,
    evaluate,
    matches,
    sampled,
)
from policies.models import Route, TimeoutAction
from policies.validation import validate

CLASSES = ("read", "write", "notify", "financial")
KNOWN = {
    "lookup_order": ToolInfo("read", ("orders",)),
    "issue_refund": ToolInfo("financial", ("payments",)),
    "email_customer": ToolInfo("notify", ("email",)),
    "update_record": ToolInfo("write", ("prod-db",)),
}
GATE = {"approver_group": "operators", "timeout_seconds": 3600}


def default_spec() -> PolicySpec:
    return PolicySpec(
        version=1,
        rules=tuple(
            Rule(**{**r, "side_effects": tuple(r.get("side_effects", ()))}) for r in DEFAULT_RULES
        ),
        sensitive_systems=tuple(DEFAULT_SENSITIVE_SYSTEMS),
    )


def act(tool: str = "lookup_order", side_effect: str | None = "read", **kw: object) -> Action:
    kw.setdefault("confidence", 0.95)
    return Action(tool=tool, side_effect=side_effect, **kw)  # type: ignore[arg-type]


# -- the default policy, as a table ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "route", "rule"),
    [
        (act("frobnicate", None), "gate", "unknown tool"),
        (act("frobnicate", None, confidence=0.1), "gate", "unknown tool"),
        (act(confidence=0.69), "gate", "low confidence"),
        (act(confidence=0.7), "auto", "read"),
        (act(confidence=None), "auto", "read"),
        (act(systems=("identity",)), "gate", "sensitive system"),
        (act(systems=("orders", "prod-db")), "gate", "sensitive system"),
        (act("issue_refund", "financial", amount=100.01), "gate", "large payment"),
        (act("issue_refund", "financial", amount=100.0), "audit", "small payment"),
        (act("issue_refund", "financial", amount=0.0), "audit", "small payment"),
        (act("issue_refund", "financial", amount=None), "audit", "small payment"),
        (act("email_customer", "notify"), "audit", "notification"),
        (act("lookup_order", "read"), "auto", "read"),
        (act("update_record", "write"), "gate", "default"),
    ],
)
def test_default_policy_routes_the_table(action: Action, route: str, rule: str) -> None:
    verdict = evaluate(default_spec(), action)

    assert (verdict.route, verdict.rule, verdict.version) == (route, rule, 1)


def test_verdict_carries_sample_rate_and_gate_settings() -> None:
    spec = default_spec()

    read = evaluate(spec, act())
    audit = evaluate(spec, act("email_customer", "notify"))
    gate = evaluate(spec, act("issue_refund", "financial", amount=500))

    assert (read.sample_rate, read.gate) == (0.05, None)
    assert (audit.sample_rate, audit.gate) == (1.0, None)
    assert gate.sample_rate == 0.0
    assert gate.gate is not None and gate.gate.as_dict() == {
        "approver_group": "operators",
        "timeout_seconds": 3600,
        "timeout_action": "reject",
        "escalate_to": "",
        "approvals_required": 1,
        "second_approver_group": "",
    }


def test_gate_settings_are_a_frozen_value_from_the_rule() -> None:
    rule = Rule("big", "gate", approver_group="leads", timeout_seconds=60, escalate_to="heads")
    verdict = evaluate(PolicySpec(version=1, rules=(rule,)), act("issue_refund", "financial"))

    assert verdict.gate == GateSettings("leads", 60, "reject", "heads")
    with pytest.raises(FrozenInstanceError):
        verdict.gate.approver_group = "anyone"  # type: ignore[misc]


def test_reasons_name_the_rule_and_the_facts() -> None:
    verdict = evaluate(default_spec(), act("issue_refund", "financial", amount=250))

    assert verdict.reasons == (
        "rule 4 'large payment' is the first that matches",
        "tool issue_refund has side effect financial",
        "amount 250 is above 100",
    )


def test_unknown_tool_matched_by_an_auto_rule_is_gated_with_a_reason() -> None:
    spec = PolicySpec(
        version=3,
        rules=(
            Rule("anything goes", "auto", agents=("refund",)),
            Rule("default", "gate", is_default=True, approver_group="leads", timeout_seconds=60),
        ),
    )

    verdict = evaluate(spec, Action(tool="mystery", side_effect=None, agent="refund"))

    assert verdict.route == "gate"
    assert verdict.rule == "anything goes"
    assert verdict.gate is not None and verdict.gate.approver_group == "leads"
    assert "an unknown tool is never auto" in verdict.reasons[-1]


def test_spec_without_default_gates_unmatched_actions() -> None:
    spec = PolicySpec(version=None, rules=(Rule("reads", "auto", side_effects=("read",)),))

    verdict = evaluate(spec, act("email_customer", "notify"))

    assert (verdict.route, verdict.rule) == ("gate", "(no rule matched)")


def test_model_choices_match_engine_constants() -> None:
    assert tuple(Route.values) == ROUTES
    assert tuple(TimeoutAction.values) == ("reject", "escalate")


# -- every criterion ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "hit", "miss"),
    [
        (Rule("r", "gate", tools=("a",)), act("a"), act("b")),
        (Rule("r", "gate", side_effects=("notify",)), act(side_effect="notify"), act()),
        (Rule("r", "gate", systems=("x", "y")), act(systems=("z", "y")), act(systems=("z",))),
        (Rule("r", "gate", amount_above=10), act(amount=10.5), act(amount=10)),
        (Rule("r", "gate", confidence_below=0.5), act(confidence=0.49), act(confidence=0.5)),
        (Rule("r", "gate", agents=("refund",)), act(agent="refund"), act(agent="travel")),
        (Rule("r", "gate", step_at_least=3), act(step=3), act(step=2)),
        (Rule("r", "gate", step_at_most=3), act(step=3), act(step=4)),
        (Rule("r", "gate", edited=True), act(edited=True), act(edited=False)),
        (Rule("r", "gate", edited=False), act(edited=False), act(edited=True)),
        (Rule("r", "gate", unknown_tool=True), act(side_effect=None), act()),
        (Rule("r", "gate", amount_above=0), act(amount=0.01), act(amount=None)),
        (Rule("r", "gate", confidence_below=1), act(confidence=0.99), act(confidence=None)),
    ],
)
def test_each_criterion_matches_and_misses(rule: Rule, hit: Action, miss: Action) -> None:
    assert matches(rule, hit)
    assert not matches(rule, miss)


def test_touches_sensitive_uses_the_specs_systems() -> None:
    rule = Rule("r", "gate", touches_sensitive=True)

    assert matches(rule, act(systems=("vault",)), sensitive_systems=("vault",))
    assert not matches(rule, act(systems=("vault",)), sensitive_systems=("prod-db",))


# -- properties -----------------------------------------------------------------------------------

names = st.sampled_from(["lookup_order", "issue_refund", "email_customer", "update_record", "zz"])
systems = st.lists(
    st.sampled_from(["orders", "payments", "prod-db", "identity", "email"]), max_size=3, unique=True
).map(tuple)
thresholds = st.one_of(st.none(), st.floats(min_value=0, max_value=1000, allow_nan=False))
confidences = st.one_of(st.none(), st.floats(min_value=0, max_value=1, allow_nan=False))


@st.composite
def rules(draw: st.DrawFn, index: int = 0) -> Rule:
    route = draw(st.sampled_from(ROUTES))
    return Rule(
        name=f"r{index}-{draw(st.integers(0, 10**6))}",
        route=route,
        tools=tuple(draw(st.lists(names, max_size=2, unique=True))),
        side_effects=tuple(draw(st.lists(st.sampled_from(CLASSES), max_size=2, unique=True))),
        systems=draw(st.one_of(st.just(()), systems)),
        touches_sensitive=draw(st.booleans()),
        amount_above=draw(thresholds),
        confidence_below=draw(confidences),
        agents=tuple(draw(st.lists(st.sampled_from(["refund", "travel"]), max_size=1))),
        step_at_least=draw(st.one_of(st.none(), st.integers(0, 5))),
        step_at_most=draw(st.one_of(st.none(), st.integers(0, 5))),
        edited=draw(st.one_of(st.none(), st.booleans())),
        unknown_tool=draw(st.booleans()),
        sample_rate=draw(st.one_of(st.none(), st.floats(0, 1))),
        approver_group="operators" if route == "gate" else "",
        timeout_seconds=60 if route == "gate" else None,
    )


@st.composite
def specs(draw: st.DrawFn) -> PolicySpec:
    count = draw(st.integers(0, 6))
    body = tuple(draw(rules(i)) for i in range(count))
    default = Rule("default", draw(st.sampled_from(ROUTES)), is_default=True, **GATE)
    sensitive = draw(systems)
    return PolicySpec(
        version=draw(st.integers(1, 99)), rules=(*body, default), sensitive_systems=sensitive
    )


@st.composite
def actions(draw: st.DrawFn) -> Action:
    tool = draw(names)
    side_effect = KNOWN[tool].side_effect if tool in KNOWN else None
    if draw(st.booleans()):
        side_effect = draw(st.one_of(st.none(), st.sampled_from(CLASSES)))
    return Action(
        tool=tool,
        side_effect=side_effect,
        systems=draw(systems),
        amount=draw(thresholds),
        confidence=draw(confidences),
        agent=draw(st.sampled_from(["refund", "travel", ""])),
        step=draw(st.integers(0, 6)),
        edited=draw(st.booleans()),
    )


@given(specs(), actions())
def test_first_matching_rule_wins(spec: PolicySpec, action: Action) -> None:
    verdict = evaluate(spec, action)
    first = next(r for r in spec.rules if matches(r, action, spec.sensitive_systems))

    assert verdict.rule == first.name
    assert all(
        not matches(r, action, spec.sensitive_systems)
        for r in spec.rules[: spec.rules.index(first)]
    )


@st.composite
def rules_matching(draw: st.DrawFn, action: Action, sensitive: tuple[str, ...]) -> Rule:
    """A rule like `rules(99)` whose every criterion is either absent or one `action` meets, so
    each example matches by construction instead of by a rare filtered draw."""

    def some(strategy: st.SearchStrategy[Any], absent: object) -> Any:
        return draw(st.one_of(st.just(absent), strategy))

    route = draw(st.sampled_from(ROUTES))
    others = st.lists(names, max_size=1).map(lambda more: tuple({action.tool, *more}))
    touched = st.lists(st.sampled_from(action.systems), min_size=1, unique=True).map(tuple)
    return Rule(
        name=f"r99-{draw(st.integers(0, 10**6))}",
        route=route,
        tools=some(others, ()),
        side_effects=() if action.side_effect is None else some(st.just((action.side_effect,)), ()),
        systems=some(touched, ()) if action.systems else (),
        touches_sensitive=bool(set(action.systems) & set(sensitive)) and draw(st.booleans()),
        amount_above=(
            some(st.floats(0, action.amount, exclude_max=True), None) if action.amount else None
        ),
        confidence_below=(
            some(st.floats(action.confidence, 1, exclude_min=True), None)
            if action.confidence is not None and action.confidence < 1
            else None
        ),
        agents=some(st.just((action.agent,)), ()) if action.agent else (),
        step_at_least=some(st.integers(0, action.step), None),
        step_at_most=some(st.integers(action.step, 6), None),
        edited=some(st.just(action.edited), None),
        unknown_tool=action.side_effect is None and draw(st.booleans()),
        sample_rate=draw(st.one_of(st.none(), st.floats(0, 1))),
        approver_group="operators" if route == "gate" else "",
        timeout_seconds=60 if route == "gate" else None,
    )


@given(specs(), actions(), st.data())
def test_a_matching_rule_put_first_decides(
    spec: PolicySpec, action: Action, data: st.DataObject
) -> None:
    rule = data.draw(rules_matching(action, spec.sensitive_systems))
    assert matches(rule, action, spec.sensitive_systems)
    assume(rule.name not in {r.name for r in spec.rules})
    expected = "gate" if rule.route == "auto" and action.side_effect is None else rule.route

    verdict = evaluate(replace(spec, rules=(rule, *spec.rules)), action)

    assert (verdict.rule, verdict.route) == (rule.name, expected)


@given(specs(), actions(), rules(98))
def test_a_rule_that_does_not_match_changes_nothing(
    spec: PolicySpec, action: Action, rule: Rule
) -> None:
    assume(not matches(rule, action, spec.sensitive_systems))
    before = evaluate(spec, action)

    after = evaluate(replace(spec, rules=(rule, *spec.rules)), action)

    assert (after.route, after.rule, after.sample_rate, after.gate, after.reasons[1:]) == (
        before.route,
        before.rule,
        before.sample_rate,
        before.gate,
        before.reasons[1:],
    )


@given(specs(), actions())
def test_default_is_always_reached(spec: PolicySpec, action: Action) -> None:
    body = spec.rules[:-1]
    verdict = evaluate(spec, action)

    assert verdict.rule in {r.name for r in spec.rules}
    if not any(matches(r, action, spec.sensitive_systems) for r in body):
        assert verdict.rule == "default"


@given(specs(), actions())
def test_unknown_tool_is_never_auto(spec: PolicySpec, action: Action) -> None:
    unknown = replace(action, side_effect=None)

    verdict = evaluate(spec, unknown)

    assert verdict.route != "auto"
    if verdict.route == "gate":
        assert verdict.gate is not None and verdict.gate.timeout_seconds


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_amount_threshold_is_strictly_above(threshold: float) -> None:
    rule = Rule("big", "gate", amount_above=threshold)

    assert not matches(rule, act(amount=threshold))
    assert matches(rule, act(amount=math.nextafter(threshold, math.inf)))
    assert not matches(rule, act(amount=math.nextafter(threshold, -math.inf)))


@given(st.floats(min_value=0, max_value=1, allow_nan=False))
def test_confidence_baseline_is_strictly_below(baseline: float) -> None:
    rule = Rule("unsure", "gate", confidence_below=baseline)

    assert not matches(rule, act(confidence=baseline))
    assert matches(rule, act(confidence=math.nextafter(baseline, -math.inf)))
    assert not matches(rule, act(confidence=math.nextafter(baseline, math.inf)))


@given(st.floats(0, 1), st.text(max_size=40))
def test_sampling_is_deterministic(rate: float, key: str) -> None:
    assert sampled(rate, key) == sampled(rate, key)
    assert sampled(0.0, key) is False
    assert sampled(1.0, key) is True


@given(st.floats(0, 1), st.floats(0, 1), st.text(max_size=40))
def test_sampling_is_monotone_in_the_rate(low: float, high: float, key: str) -> None:
    low, high = sorted((low, high))

    assert not sampled(low, key) or sampled(high, key)


def test_sampling_rate_is_close_to_the_share_of_keys() -> None:
    hits = sum(sampled(0.05, f"step:{i}") for i in range(20_000))

    assert 850 <= hits <= 1150
    assert sampled(0.05, "step:17") == sampled(0.05, "step:17")


def test_sampling_is_pinned_across_processes() -> None:
    # A stable digest, not hash(): these keys are sampled on every interpreter and machine.
    picked = [i for i in range(100) if sampled(0.25, f"step:{i}")]

    assert picked == [
        29,
        35,
        36,
        39,
        42,
        50,
        52,
        56,
        58,
        63,
        65,
        66,
        68,
        71,
        72,
        78,
        81,
        83,
        85,
        94,
        96,
    ]


def test_queues_audit_follows_route_and_rate() -> None:
    spec = default_spec()
    keys = [f"step:{i}" for i in range(2000)]

    read = evaluate(spec, act())
    audit = evaluate(spec, act("email_customer", "notify"))
    gate = evaluate(spec, act("update_record", "write"))

    assert 60 <= sum(read.queues_audit(k) for k in keys) <= 140
    assert all(audit.queues_audit(k) for k in keys)
    assert not any(gate.queues_audit(k) for k in keys)


# -- validation -----------------------------------------------------------------------------------


def codes(rules_: list[Rule], sensitive: tuple[str, ...] = ()) -> list[tuple[str, int | None]]:
    return [(m.code, m.position) for m in validate(rules_, KNOWN, CLASSES, sensitive) if m.is_error]


DEFAULT = Rule("default", "gate", is_default=True, **GATE)


def test_shipped_default_policy_is_valid() -> None:
    spec = default_spec()

    assert validate(spec.rules, KNOWN, CLASSES, spec.sensitive_systems) == []


def test_missing_default_is_reported() -> None:
    messages = validate([Rule("reads", "auto", side_effects=("read",))], KNOWN, CLASSES)

    assert [(m.code, m.message) for m in messages] == [
        ("missing_default", "the policy has no default rule: add a default rule as the last rule")
    ]


def test_catch_all_rule_shadows_everything_after_it() -> None:
    assert codes(
        [Rule("everything", "audit"), Rule("reads", "auto", side_effects=("read",)), DEFAULT]
    ) == [("shadowed", 2), ("shadowed", 3)]


def test_default_not_last_is_reported() -> None:
    assert codes([DEFAULT, Rule("reads", "auto", side_effects=("read",))]) == [
        ("default_not_last", 1),
        ("shadowed", 2),
    ]


def test_second_default_is_reported() -> None:
    assert codes([replace(DEFAULT, name="d1"), DEFAULT]) == [
        ("multiple_defaults", 1),
        ("shadowed", 2),
    ]


@pytest.mark.parametrize(
    ("rule", "code"),
    [
        (Rule("r", "gate", confidence_below=1.5, **GATE), "confidence_out_of_range"),
        (Rule("r", "gate", confidence_below=-0.1, **GATE), "confidence_out_of_range"),
        (Rule("r", "gate", amount_above=-1, **GATE), "amount_out_of_range"),
        (Rule("r", "gate", amount_above=math.nan, **GATE), "amount_out_of_range"),
        (
            Rule("r", "audit", sample_rate=1.01, side_effects=("notify",)),
            "sample_rate_out_of_range",
        ),
        (Rule("r", "auto", sample_rate=-0.5, side_effects=("read",)), "sample_rate_out_of_range"),
        (Rule("r", "gate", tools=("no_such_tool",), **GATE), "unknown_tool"),
        (Rule("r", "gate", side_effects=("telepathy",), **GATE), "unknown_class"),
        (Rule("r", "gate", tools=("issue_refund",), approver_group="ops"), "gate_without_timeout"),
        (Rule("r", "gate", tools=("issue_refund",), timeout_seconds=60), "gate_without_group"),
        (
            Rule("r", "gate", tools=("issue_refund",), timeout_action="escalate", **GATE),
            "escalate_without_group",
        ),
        (Rule("r", "gate", step_at_least=4, step_at_most=2, **GATE), "step_out_of_range"),
        (Rule("r", "maybe", tools=("issue_refund",)), "invalid_route"),
        (Rule(" ", "gate", tools=("issue_refund",), **GATE), "empty_name"),
    ],
)
def test_rule_errors_are_reported_with_their_position(rule: Rule, code: str) -> None:
    assert codes([rule, DEFAULT]) == [(code, 1)]


def test_threshold_messages_say_what_is_wrong() -> None:
    messages = validate(
        [Rule("unsure", "gate", confidence_below=1.5, **GATE), DEFAULT], KNOWN, CLASSES
    )

    assert messages[0].message == ("rule 1 'unsure' has confidence baseline 1.5, outside [0, 1]")


def test_boundaries_of_ranges_are_valid() -> None:
    rules_ = [
        Rule("a", "gate", confidence_below=0.0, **GATE),
        Rule("b", "gate", confidence_below=1.0, amount_above=0.0, **GATE),
        Rule("c", "auto", side_effects=("read",), sample_rate=0.0),
        Rule("d", "audit", side_effects=("notify",), sample_rate=1.0),
        DEFAULT,
    ]

    assert codes(rules_) == []


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        (
            Rule("all reads", "auto", side_effects=("read",)),
            Rule("order reads", "audit", tools=("lookup_order",)),
        ),
        (
            Rule("over 100", "gate", amount_above=100, **GATE),
            Rule("over 500", "gate", amount_above=500, side_effects=("financial",), **GATE),
        ),
        (
            Rule("unsure", "gate", confidence_below=0.7, **GATE),
            Rule("very unsure", "deny", confidence_below=0.3),
        ),
        (
            Rule("payments or email", "audit", systems=("payments", "email")),
            Rule("refunds", "gate", tools=("issue_refund",), **GATE),
        ),
        (
            Rule("audit notify", "audit", side_effects=("notify",)),
            Rule("notify refunds", "gate", side_effects=("notify",), agents=("refund",), **GATE),
        ),
        (
            Rule("sensitive", "gate", touches_sensitive=True, **GATE),
            Rule("prod writes", "gate", tools=("update_record",), **GATE),
        ),
        (
            Rule("late steps", "audit", step_at_least=2),
            Rule("later steps", "gate", step_at_least=5, step_at_most=8, **GATE),
        ),
    ],
)
def test_shadowed_rule_is_reported(earlier: Rule, later: Rule) -> None:
    messages = [
        m
        for m in validate([earlier, later, DEFAULT], KNOWN, CLASSES, ("prod-db",))
        if m.code == "shadowed" and m.position == 2
    ]

    assert [m.rule for m in messages] == [later.name]
    assert f"rule 1 '{earlier.name}' matches every action it matches" in messages[0].message


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        (
            Rule("big payments", "gate", side_effects=("financial",), amount_above=100, **GATE),
            Rule("payments", "audit", side_effects=("financial",)),
        ),
        (
            Rule("order reads", "audit", tools=("lookup_order",)),
            Rule("all reads", "auto", side_effects=("read",)),
        ),
        (
            Rule("unsure", "gate", confidence_below=0.3, **GATE),
            Rule("fairly unsure", "audit", confidence_below=0.7),
        ),
        (
            Rule("edited", "gate", edited=True, **GATE),
            Rule("any notify", "audit", side_effects=("notify",)),
        ),
    ],
)
def test_narrower_earlier_rule_does_not_shadow(earlier: Rule, later: Rule) -> None:
    assert codes([earlier, later, DEFAULT]) == []


CRITERIA = {
    "tools": st.lists(names, min_size=1, max_size=3, unique=True).map(tuple),
    "side_effects": st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3, unique=True).map(
        tuple
    ),
    "systems": systems.filter(bool),
    "touches_sensitive": st.just(True),
    "amount_above": st.sampled_from([0.0, 50.0, 100.0, 500.0]),
    "confidence_below": st.sampled_from([0.3, 0.5, 0.7, 1.0]),
    "agents": st.sampled_from([("refund",), ("refund", "travel")]),
    "step_at_least": st.integers(0, 4),
    "step_at_most": st.integers(0, 4),
    "edited": st.booleans(),
    "unknown_tool": st.just(True),
}


@st.composite
def sparse_rules(draw: st.DrawFn, name: str) -> Rule:
    """A rule with one to three criteria, so that overlaps between two rules are common."""
    chosen = draw(st.lists(st.sampled_from(sorted(CRITERIA)), min_size=1, max_size=3, unique=True))
    return Rule(name, "audit", **{key: draw(CRITERIA[key]) for key in chosen})


@st.composite
def catalog_actions(draw: st.DrawFn) -> Action:
    """Actions whose tool facts agree with the catalog, as at evaluation time."""
    action = draw(actions())
    if action.tool in KNOWN:
        info = KNOWN[action.tool]
        return replace(
            action,
            side_effect=info.side_effect,
            systems=tuple(dict.fromkeys((*info.systems, *action.systems))),
        )
    return replace(action, side_effect=None)


@settings(max_examples=400)
@given(sparse_rules("earlier"), sparse_rules("later"), st.lists(catalog_actions(), max_size=20))
def test_shadowing_is_never_a_false_alarm(earlier: Rule, later: Rule, sample: list[Action]) -> None:
    sensitive = ("prod-db", "identity")
    shadowed = any(
        m.code == "shadowed" and m.position == 2
        for m in validate([earlier, later, DEFAULT], KNOWN, CLASSES, sensitive)
    )

    if shadowed:
        for action in sample:
            if matches(later, action, sensitive):
                assert matches(earlier, action, sensitive)


def test_warnings_do_not_block() -> None:
    messages = validate(
        [
            Rule("deny reads", "deny", side_effects=("read",), sample_rate=0.5),
            Rule("unknown", "auto", unknown_tool=True),
            DEFAULT,
        ],
        KNOWN,
        CLASSES,
    )

    assert [(m.level, m.code) for m in messages] == [
        ("warning", "sample_rate_ignored"),
        ("warning", "unknown_tool_auto"),
    ]


def test_unknown_tool_check_is_skipped_without_a_catalog() -> None:
    rules_ = [Rule("r", "gate", tools=("anything",), **GATE), DEFAULT]

    assert validate(rules_, None, CLASSES) == []
    assert [m.code for m in validate(rules_, {}, CLASSES)] == ["unknown_tool"]
