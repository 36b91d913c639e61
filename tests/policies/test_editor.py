"""The policy editor's second pass (issue 10, item 19): a new rule goes where it is reached,
gate fields default sensibly, fields of another route are hidden, and a draft can be discarded."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from policies.models import Policy, PolicyChange, PolicyRule, PolicyVersion, VersionStatus
from policies.selectors import policy_version_list
from policies.services import PolicyImmutable, policy_draft_create, policy_publish

pytestmark = pytest.mark.django_db


@pytest.fixture
def draft(default_policy: Policy, policy_admin: Any) -> PolicyVersion:
    return policy_draft_create(policy=default_policy, author=policy_admin)


def names(draft: PolicyVersion) -> list[str]:
    rules = PolicyRule.objects.filter(version=draft).order_by("position")
    return list(rules.values_list("name", flat=True))


def test_a_new_rule_goes_where_the_admin_says_it_is_reached(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    page = admin_client.get(reverse("policies:version_detail", args=[draft.pk])).content.decode()
    assert 'name="insert_before"' in page and "Before rule 1" in page

    admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {"name": "emails gated", "route": "gate", "tools": "email_customer", "insert_before": "2"},
    )

    assert names(draft)[1] == "emails gated"


def test_a_new_rule_at_the_default_position_is_reached_and_the_default_stays_last(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    # "read" (rule 7) sends every read to auto: a narrower read rule must go before it.
    admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {
            "name": "supplier reads",
            "route": "gate",
            "side_effects": "read",
            "systems": "suppliers",
            "insert_before": "",
        },
    )
    # A rule no earlier rule covers still goes just before the default rule.
    admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {"name": "writes audited", "route": "audit", "side_effects": "write"},
    )

    order = names(draft)
    assert order.index("supplier reads") == order.index("read") - 1
    assert order[-2:] == ["writes audited", "default"]
    page = admin_client.get(reverse("policies:version_detail", args=[draft.pk])).content.decode()
    assert "never reached" not in page


def test_a_gate_rule_gets_operators_as_approvers_by_default_and_others_no_gate_fields(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {"name": "big writes", "route": "gate", "side_effects": "write", "timeout_seconds": "600"},
    )
    admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {"name": "audited", "route": "audit", "side_effects": "write", "approver_group": "x"},
    )

    gate = PolicyRule.objects.get(version=draft, name="big writes")
    assert gate.approver_group == "operators" and gate.timeout_seconds == 600
    audit = PolicyRule.objects.get(version=draft, name="audited")
    assert audit.approver_group == "" and audit.timeout_seconds is None


def test_fields_of_another_route_are_marked_for_hiding(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    page = admin_client.get(reverse("policies:version_detail", args=[draft.pk])).content.decode()

    for name in ("approver_group", "timeout_seconds", "timeout_action", "escalate_to"):
        field = page.index(f'name="{name}"')
        assert page.rindex('class="gate-only"', 0, field) > page.rindex('class="', 0, field) - 400
    assert 'value="operators"' in page and 'value="3600"' in page
    sample = page.index('name="sample_rate"')
    assert page.rindex('class="lane-only"', 0, sample) > sample - 1500


def test_a_draft_can_be_discarded_once_and_leaves_the_list(
    admin_client: Client, draft: PolicyVersion, default_policy: Policy, tools: Any
) -> None:
    url = reverse("policies:version_discard", args=[draft.pk])
    assert admin_client.post(url, {}).status_code == 400
    assert admin_client.post(url, {"confirm": "on"}).status_code == 302

    draft.refresh_from_db()
    assert draft.status == VersionStatus.DISCARDED
    change = PolicyChange.objects.filter(version=draft).order_by("-id").first()
    assert change.action == "policies.draft.discarded"
    assert draft not in policy_version_list(default_policy)
    assert admin_client.post(url, {"confirm": "on"}).status_code == 400
    with pytest.raises(PolicyImmutable):
        policy_publish(draft=draft, author=None, change_note="no")


def test_publish_and_revert_need_a_confirmation_after_the_preview(
    admin_client: Client, draft: PolicyVersion, policy_admin: Any, tools: Any
) -> None:
    page = admin_client.get(reverse("policies:version_detail", args=[draft.pk])).content.decode()
    assert "Compared with the active v1: no rule changes" in page

    refused = admin_client.post(
        reverse("policies:version_publish", args=[draft.pk]), {"change_note": "x"}
    )

    assert refused.status_code == 400
    assert "Confirm that you have read what changes." in refused.content.decode()
    assert PolicyVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    v1 = PolicyVersion.objects.get(policy=draft.policy, number=1)
    published = admin_client.post(
        reverse("policies:version_publish", args=[draft.pk]), {"change_note": "x", "confirm": "on"}
    )
    assert published.status_code == 302
    revert = admin_client.post(
        reverse("policies:version_revert", args=[v1.pk]), {"change_note": "y"}
    )
    assert revert.status_code == 400
    assert PolicyVersion.objects.filter(policy=draft.policy, number=3).count() == 0
