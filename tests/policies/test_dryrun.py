"""Dry-run against a hand-built history (pure, then through the command), and the agentops hook
that turns recorded steps into history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from policies import catalog
from policies.catalog import RecordedAction
from policies.defaults import DEFAULT_RULES, DEFAULT_SENSITIVE_SYSTEMS
from policies.dryrun import DEFAULT_DECISION_SECONDS, dry_run, dry_run_text
from policies.engine import Action, PolicySpec, Rule
from policies.models import Policy, PolicyRule
from policies.services import policy_draft_create, policy_rule_update

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def default_spec() -> PolicySpec:
    return PolicySpec(
        version=None,
        rules=tuple(
            Rule(**{**r, "side_effects": tuple(r.get("side_effects", ()))}) for r in DEFAULT_RULES
        ),
        sensitive_systems=tuple(DEFAULT_SENSITIVE_SYSTEMS),
    )


def record(
    tool: str,
    side_effect: str | None,
    routed: str,
    *,
    n: int,
    systems: tuple = (),
    amount: float | None = None,
    confidence: float = 0.9,
    decided: list[float] | None = None,
    now: datetime = NOW,
) -> list[RecordedAction]:
    return [
        RecordedAction(
            action=Action(
                tool,
                side_effect,
                systems,
                amount=amount,
                confidence=confidence,
                agent="refund",
                step=i % 5,
            ),
            routed=routed,
            decided_seconds=decided[i] if decided else None,
            at=now - timedelta(minutes=i),
        )
        for i in range(n)
    ]


def week_of_history(now: datetime = NOW) -> list[RecordedAction]:
    """900 actions; under the default policy 14 move auto → gate (10 unsure, 4 sensitive)."""
    return [
        *record("lookup_order", "read", "auto", n=500, systems=("orders",), now=now),
        *record("lookup_order", "read", "auto", n=10, systems=("orders",), confidence=0.5, now=now),
        *record("email_customer", "notify", "audit", n=200, systems=("email",), now=now),
        *record("update_record", "write", "auto", n=4, systems=("prod-db",), now=now),
        *record("issue_refund", "financial", "audit", n=86, amount=50.0, now=now),
        *record(
            "issue_refund",
            "financial",
            "gate",
            n=20,
            amount=500.0,
            decided=[60.0] * 10 + [300.0] * 10,
            now=now,
        ),
        *record("archive_note", "write", "gate", n=80, systems=("notes",), now=now),
    ]


def test_dry_run_counts_lane_moves_and_rules() -> None:
    result = dry_run(default_spec(), week_of_history(), days=7)

    assert (result.total, result.moved, result.unchanged) == (900, 14, 886)
    assert [(m.before, m.after, m.count, m.rules) for m in result.moves] == [
        ("auto", "gate", 14, (("low confidence", 10), ("sensitive system", 4))),
    ]
    assert result.move_lines() == ["auto → gate: 14 of 900 (low confidence 10, sensitive system 4)"]
    assert result.lanes_before == {"auto": 514, "audit": 286, "gate": 100, "deny": 0}
    assert result.lanes_after == {"auto": 500, "audit": 286, "gate": 114, "deny": 0}
    assert dict(result.rule_hits) == {
        "unknown tool": 0,
        "low confidence": 10,
        "sensitive system": 4,
        "large payment": 20,
        "small payment": 86,
        "notification": 200,
        "read": 500,
        "default": 80,
    }


def test_dry_run_projects_reviewer_load_from_the_median_decision_time() -> None:
    result = dry_run(default_spec(), week_of_history(), days=7)

    assert result.decisions_recorded == 20
    assert result.median_decision_seconds == 180.0
    assert result.gates_per_day_before == pytest.approx(100 / 7)
    assert result.gates_per_day_after == pytest.approx(114 / 7)
    assert result.reviewer_hours_per_day_after == pytest.approx(114 / 7 * 180 / 3600)
    assert result.reviewer_hours_per_day_before == pytest.approx(100 / 7 * 180 / 3600)


def test_dry_run_uses_a_default_median_without_decisions() -> None:
    history = record("update_record", "write", "auto", n=12, systems=("prod-db",))

    result = dry_run(default_spec(), history, days=2)

    assert result.median_decision_seconds == DEFAULT_DECISION_SECONDS == 120.0
    assert result.gates_per_day_after == 6.0
    assert result.reviewer_hours_per_day_after == pytest.approx(6 * 120 / 3600)


def test_dry_run_of_a_stricter_draft_moves_audits_to_gates() -> None:
    spec = PolicySpec(
        version=None,
        rules=(
            Rule(
                "everything gated",
                "gate",
                is_default=True,
                approver_group="ops",
                timeout_seconds=60,
            ),
        ),
    )

    result = dry_run(spec, week_of_history(), days=7)

    assert [(m.before, m.after, m.count) for m in result.moves] == [
        ("auto", "gate", 514),
        ("audit", "gate", 286),
    ]
    assert result.lanes_after["gate"] == 900


def test_dry_run_text_reads_like_the_issue() -> None:
    text = dry_run_text(dry_run(default_spec(), week_of_history(), days=7), title="Dry-run")

    assert "Dry-run: 900 recorded actions in the last 7 day(s)." in text
    assert "  auto → gate: 14 of 900 (low confidence 10, sensitive system 4)" in text
    assert "Unchanged: 886 of 900" in text
    assert (
        "Reviewer load: 14.3 → 16.3 gates/day x 180 s (median of 20 recorded decisions) = "
        "0.71 → 0.81 reviewer-hours/day"
    ) in text


def test_dry_run_needs_at_least_one_day() -> None:
    with pytest.raises(ValueError, match="days"):
        dry_run(default_spec(), [], days=0)


def test_catalog_history_is_limited_to_the_window() -> None:
    old = record("lookup_order", "read", "auto", n=3, now=NOW - timedelta(days=10))
    new = record("lookup_order", "read", "auto", n=2)

    with catalog.registered(tools=dict, history=lambda since: [*old, *new]):
        assert len(catalog.recorded_actions(NOW - timedelta(days=7))) == 2
        assert len(catalog.recorded_actions(NOW - timedelta(days=30))) == 5


# -- the command ----------------------------------------------------------------------------------


@pytest.fixture
def week(tools: Any, history: list[RecordedAction]) -> list[RecordedAction]:
    history.extend(week_of_history(timezone.now()))
    return history


@pytest.mark.django_db
def test_dry_run_command_prints_the_report(
    default_policy: Policy, author: Any, week: list[RecordedAction]
) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    out = StringIO()

    call_command("policy", "dry-run", "--draft", str(draft.pk), "--days", "7", stdout=out)

    text = out.getvalue()
    assert f"Dry-run of default draft #{draft.pk}: 900 recorded actions" in text
    assert "auto → gate: 14 of 900 (low confidence 10, sensitive system 4)" in text


@pytest.mark.django_db
def test_dry_run_command_json(
    default_policy: Policy, author: Any, week: list[RecordedAction]
) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    policy_rule_update(
        rule=PolicyRule.objects.get(version=draft, name="large payment"),
        author=author,
        fields={"amount_above": 40},
    )
    out = StringIO()

    call_command("policy", "dry-run", "--draft", str(draft.pk), "--days", "7", "--json", stdout=out)

    data = json.loads(out.getvalue())
    assert (data["total"], data["moved"], data["version_id"]) == (900, 100, draft.pk)
    assert data["moves"] == [
        {
            "from": "auto",
            "to": "gate",
            "count": 14,
            "rules": {"low confidence": 10, "sensitive system": 4},
        },
        {"from": "audit", "to": "gate", "count": 86, "rules": {"large payment": 86}},
    ]
    assert data["median_decision_seconds"] == 180.0


@pytest.mark.django_db
def test_dry_run_command_rejects_unknown_draft() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no policy version with id 999999"):
        call_command("policy", "dry-run", "--draft", "999999", "--days", "7")


# -- the agentops hook over real recorded steps ---------------------------------------------------


@pytest.mark.django_db
def test_hook_turns_routed_steps_into_history(sim: str) -> None:
    from agentops import policy_hooks
    from agentops.engine import task_create
    from agentops.engine.registry import get_tool
    from agentops.engine.runner import task_advance
    from agentops.models import Step

    since = timezone.now() - timedelta(minutes=1)
    task = task_create(
        agent="refund", goal="Refund order A1001", input={"order_id": "A1001", "confidence": 0.9}
    )
    for _ in range(20):
        if task_advance(task_id=task.pk, owner="test") != "yielded":
            break
    routed = list(Step.objects.filter(task=task).exclude(route="").order_by("ordinal"))
    lookups: list[list[int]] = []

    def decision_seconds(step_ids: list[int]) -> dict[int, float]:
        lookups.append(step_ids)
        return {routed[0].pk: 42.0}

    with catalog.registered(tools=dict):
        policy_hooks.register(decision_seconds=decision_seconds)
        records = catalog.recorded_actions(since)
        known = catalog.known_tools()

    assert len(routed) >= 3
    assert lookups == [[s.pk for s in routed]]
    assert [(r.action.step, r.routed) for r in records] == [(s.ordinal, s.route) for s in routed]
    assert [r.decided_seconds for r in records] == [42.0] + [None] * (len(routed) - 1)
    for r, step in zip(records, routed, strict=True):
        tool = get_tool(step.model_response["tool_calls"][0]["name"])
        assert (r.action.tool, r.action.side_effect, r.action.systems) == (
            tool.name,
            tool.side_effect,
            tool.systems,
        )
        assert (r.action.agent, r.action.confidence, r.at) == ("refund", 0.9, step.started_at)
    assert known["issue_refund"].side_effect == "financial"
    assert known["lookup_order"].systems == ("orders",)


# The catalog lists the MCP tools steps recorded too: it reads the steps.
@pytest.mark.django_db
def test_hook_looks_up_one_tool_as_the_catalog_lists_it() -> None:
    from agentops import policy_hooks

    with catalog.registered(tools=dict):
        policy_hooks.register()
        listed = catalog.known_tools()
        looked_up = {name: catalog.tool_info(name) for name in listed}
        unknown = catalog.tool_info("no_such_tool")

    assert listed and looked_up == listed
    assert unknown is None
