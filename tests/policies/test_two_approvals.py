"""Two-person approval in the policy (issue 24, item 5): a gate rule may want two approvals from
different people, the second of another group; the editor offers it, validation names what is
wrong, the rule hands it to the gate in its verdict, and the version page shows it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from policies.engine import Action, PolicySpec, Rule, evaluate
from policies.models import Policy, PolicyRule, PolicyVersion
from policies.selectors import policy_spec_of
from policies.services import PolicyError, policy_draft_create, rule_fields_clean
from policies.validation import validate

CLASSES = ("read", "write", "notify", "financial")
GATE = {"route": "gate", "approver_group": "operators", "timeout_seconds": 600}


def codes(rules: list[Rule]) -> dict[str, str]:
    return {m.code: m.level for m in validate(rules, None, CLASSES) if m.rule == rules[0].name}


def test_validation_wants_one_or_two_approvals_and_a_second_group_only_with_two() -> None:
    default = Rule(name="default", is_default=True, **GATE)  # type: ignore[arg-type]

    def rule(**fields: Any) -> list[Rule]:
        return [Rule(name="big", side_effects=("financial",), **{**GATE, **fields}), default]

    assert "approvals_out_of_range" not in codes(rule(approvals_required=2))
    assert codes(rule(approvals_required=3))["approvals_out_of_range"] == "error"
    assert codes(rule(approvals_required=0))["approvals_out_of_range"] == "error"
    assert codes(rule(second_approver_group="leads"))["second_group_ignored"] == "warning"
    assert codes(rule(route="audit", approvals_required=2))["approvals_ignored"] == "warning"
    messages = validate(rule(approvals_required=3), None, CLASSES)
    [message] = [m for m in messages if m.code.startswith("appr")]
    assert message.message == ("rule 1 'big' wants 3 approvals; use 1 or 2 (two different people)")


def test_the_verdict_hands_the_two_approvals_to_the_gate() -> None:
    spec = PolicySpec(
        version=4,
        rules=(
            Rule(
                name="big",
                side_effects=("financial",),
                approvals_required=2,
                second_approver_group="finance leads",
                **GATE,
            ),
            Rule(name="default", is_default=True, **GATE),
        ),
    )

    verdict = evaluate(spec, Action(tool="issue_refund", side_effect="financial"))

    assert verdict.gate is not None
    assert (verdict.gate.approvals_required, verdict.gate.second_approver_group) == (
        2,
        "finance leads",
    )
    assert verdict.as_dict()["gate"]["approvals_required"] == 2


def test_stored_fields_are_cleaned_and_what_a_column_cannot_hold_is_refused() -> None:
    assert rule_fields_clean({"approvals_required": ""}) == {"approvals_required": 1}
    assert rule_fields_clean({"approvals_required": "2"}) == {"approvals_required": 2}
    assert rule_fields_clean({"second_approver_group": " leads "}) == {
        "second_approver_group": "leads"
    }
    with pytest.raises(PolicyError, match="approvals must be 1, or 2"):
        rule_fields_clean({"approvals_required": -1})
    with pytest.raises(PolicyError, match="must be a number"):
        rule_fields_clean({"approvals_required": "two"})


@pytest.mark.django_db
def test_the_editor_adds_a_four_eyes_rule_and_the_version_page_shows_it(
    admin_client: Client, default_policy: Policy, policy_admin: Any, tools: Any
) -> None:
    draft: PolicyVersion = policy_draft_create(policy=default_policy, author=policy_admin)
    no_token = Client(enforce_csrf_checks=True)
    no_token.force_login(policy_admin)
    url = reverse("policies:rule_add", args=[draft.pk])
    body = {
        "name": "very large refund",
        "route": "gate",
        "side_effects": "financial",
        "amount_above": "1000",
        "timeout_seconds": "600",
        "approvals_required": "2",
        "second_approver_group": "finance leads",
    }

    assert no_token.post(url, body).status_code == 403
    admin_client.post(url, body)
    admin_client.post(url, {**body, "name": "audited", "route": "audit", "amount_above": "5"})

    rule = PolicyRule.objects.get(version=draft, name="very large refund")
    assert (rule.approvals_required, rule.second_approver_group) == (2, "finance leads")
    audit = PolicyRule.objects.get(version=draft, name="audited")
    assert (audit.approvals_required, audit.second_approver_group) == (1, "")
    spec = policy_spec_of(draft)
    assert [r.approvals_required for r in spec.rules if r.name == "very large refund"] == [2]
    page = admin_client.get(reverse("policies:version_detail", args=[draft.pk])).content.decode()
    assert (
        'two approvals</strong>, the second from <span translate="no">finance leads</span>' in page
    )
    assert 'name="approvals_required"' in page and 'name="second_approver_group"' in page
