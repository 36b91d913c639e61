"""`manage.py policy evaluate` answers from the active version, in text and JSON."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from policies import catalog
from policies.models import Policy, PolicyRule
from policies.services import policy_draft_create, policy_publish, policy_rule_update

pytestmark = pytest.mark.django_db


def evaluate(*args: str) -> str:
    out = StringIO()
    call_command("policy", "evaluate", *args, stdout=out)
    return out.getvalue()


def evaluate_json(*args: str) -> dict[str, Any]:
    return json.loads(evaluate(*args, "--json"))


def test_evaluate_prints_route_rule_reasons_and_version(tools: Any) -> None:
    text = evaluate("--tool", "issue_refund", "--amount", "250", "--confidence", "0.9")

    assert text.splitlines() == [
        "route: gate",
        "rule: large payment",
        "reasons:",
        "  - rule 4 'large payment' is the first that matches",
        "  - tool issue_refund has side effect financial",
        "  - amount 250 is above 100",
        "version: 1 (policy default)",
        "gate: approver group operators, timeout 3600 s, then reject",
    ]


@pytest.mark.parametrize(
    ("args", "route", "rule"),
    [
        (["--tool", "issue_refund", "--amount", "100"], "audit", "small payment"),
        (["--tool", "email_customer", "--confidence", "0.95"], "audit", "notification"),
        (["--tool", "lookup_order", "--confidence", "0.95"], "auto", "read"),
        (["--tool", "lookup_order", "--confidence", "0.6"], "gate", "low confidence"),
        (["--tool", "lookup_order", "--systems", "identity"], "gate", "sensitive system"),
        (["--tool", "update_record"], "gate", "sensitive system"),
        (["--tool", "archive_note", "--agent", "refund"], "gate", "default"),
    ],
)
def test_evaluate_table(tools: Any, args: list[str], route: str, rule: str) -> None:
    data = evaluate_json(*args)

    assert (data["route"], data["rule"], data["version"]) == (route, rule, 1)


def test_evaluate_unknown_tool_is_never_auto(tools: Any) -> None:
    data = evaluate_json("--tool", "teleport", "--confidence", "0.99")

    assert data["route"] == "gate"
    assert data["rule"] == "unknown tool"
    assert data["action"]["side_effect"] is None
    assert data["gate"]["approver_group"] == "operators"


def test_evaluate_with_an_empty_catalog_treats_every_tool_as_unknown() -> None:
    with catalog.registered(tools=dict):
        data = evaluate_json("--tool", "lookup_order", "--confidence", "0.99")

    assert (data["route"], data["rule"]) == ("gate", "unknown tool")


def test_evaluate_json_carries_sample_rate(tools: Any) -> None:
    data = evaluate_json("--tool", "lookup_order", "--confidence", "0.9", "--agent", "refund")

    assert data["sample_rate"] == 0.05
    assert data["gate"] is None
    assert data["action"] == {
        "tool": "lookup_order",
        "side_effect": "read",
        "systems": ["orders"],
        "amount": None,
        "confidence": 0.9,
        "agent": "refund",
        "step": 0,
        "edited": False,
    }


def test_evaluate_answers_from_the_newest_published_version(
    tools: Any, default_policy: Policy, author: Any
) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    policy_rule_update(
        rule=PolicyRule.objects.get(version=draft, name="large payment"),
        author=author,
        fields={"amount_above": 20},
    )

    before = evaluate_json("--tool", "issue_refund", "--amount", "50")
    policy_publish(draft=draft, author=author, change_note="lower threshold")
    after = evaluate_json("--tool", "issue_refund", "--amount", "50")

    assert (before["route"], before["version"]) == ("audit", 1)
    assert (after["route"], after["version"]) == ("gate", 2)


def test_evaluate_unknown_policy_is_an_error() -> None:
    with pytest.raises(CommandError, match="no published version"):
        evaluate("--tool", "x", "--policy", "nope")
