"""The policy editor over HTTP: who may use it, and an admin changing, dry-running, publishing and
reverting a policy with real requests (plain and htmx)."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from policies.catalog import RecordedAction
from policies.engine import Action
from policies.models import Policy, PolicyChange, PolicyRule, PolicyVersion, VersionStatus
from policies.selectors import policy_version_active
from policies.services import (
    policy_draft_create,
    policy_publish,
    policy_rule_add,
    policy_rule_delete,
)

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def words(page: str) -> str:
    """The page's text as a person reads it: no markup, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def draft(default_policy: Policy, policy_admin: Any) -> PolicyVersion:
    return policy_draft_create(policy=default_policy, author=policy_admin)


def editor_urls(policy: Policy, draft: PolicyVersion) -> list[tuple[str, str]]:
    """Every editor endpoint, with the method it answers."""
    rule = PolicyRule.objects.filter(version=draft).first()
    v = draft.pk
    return [
        ("get", reverse("policies:index")),
        ("get", reverse("policies:policy_detail", args=[policy.pk])),
        ("post", reverse("policies:draft_create", args=[policy.pk])),
        ("get", reverse("policies:version_diff", args=[policy.pk])),
        ("get", reverse("policies:version_detail", args=[v])),
        ("post", reverse("policies:rule_add", args=[v])),
        ("get", reverse("policies:rule_edit", args=[v, rule.pk])),
        ("post", reverse("policies:rule_edit", args=[v, rule.pk])),
        ("post", reverse("policies:rule_delete", args=[v, rule.pk])),
        ("post", reverse("policies:rule_move", args=[v, rule.pk])),
        ("post", reverse("policies:version_settings", args=[v])),
        ("post", reverse("policies:version_publish", args=[v])),
        ("post", reverse("policies:version_revert", args=[v])),
        ("get", reverse("policies:version_dry_run", args=[v])),
    ]


# -- who may use the editor -----------------------------------------------------------------------


def test_every_editor_endpoint_is_forbidden_to_non_admins(
    client: Client, operator: Any, default_policy: Policy, draft: PolicyVersion
) -> None:
    client.force_login(operator)
    rules_before = PolicyRule.objects.filter(version=draft).count()
    versions_before = PolicyVersion.objects.count()

    statuses = [
        (
            method,
            url,
            getattr(client, method)(
                url, {"change_note": "x", "name": "n", "route": "auto", "position": 0}
            ).status_code,
        )
        for method, url in editor_urls(default_policy, draft)
    ]

    assert {status for _, _, status in statuses} == {403}, statuses
    assert len(statuses) == 14
    assert PolicyRule.objects.filter(version=draft).count() == rules_before
    assert PolicyVersion.objects.count() == versions_before
    assert PolicyVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT


def test_htmx_publish_by_a_non_admin_is_forbidden(
    client: Client, operator: Any, draft: PolicyVersion
) -> None:
    client.force_login(operator)

    response = client.post(
        reverse("policies:version_publish", args=[draft.pk]), {"change_note": "sneak"}, **HTMX
    )

    assert response.status_code == 403
    assert policy_version_active().number == 1


def test_anonymous_users_are_sent_to_login(
    client: Client, default_policy: Policy, draft: PolicyVersion
) -> None:
    for method, url in editor_urls(default_policy, draft):
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    assert PolicyVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT


def test_superuser_is_a_policy_admin(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))

    assert client.get(reverse("policies:index")).status_code == 200


def test_posts_need_a_csrf_token(policy_admin: Any, draft: PolicyVersion) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(policy_admin)

    response = client.post(
        reverse("policies:version_publish", args=[draft.pk]), {"change_note": "no token"}
    )

    assert response.status_code == 403
    assert PolicyVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT


# -- pages ----------------------------------------------------------------------------------------


def test_index_lists_policies_with_active_version_and_drafts(
    admin_client: Client, draft: PolicyVersion
) -> None:
    response = admin_client.get(reverse("policies:index"))

    assert response.status_code == 200
    body = response.content.decode()
    assert "default" in body and ">v1<" in body and f"draft #{draft.pk}" in body


def test_policy_page_shows_versions_and_history(
    admin_client: Client, default_policy: Policy, draft: PolicyVersion
) -> None:
    response = admin_client.get(reverse("policies:policy_detail", args=[default_policy.pk]))

    body = response.content.decode()
    assert response.status_code == 200
    assert "created a draft" in body and "padmin" in body
    assert "Shipped default policy." in body


def test_published_version_page_has_no_editor(admin_client: Client) -> None:
    active = policy_version_active()

    body = admin_client.get(reverse("policies:version_detail", args=[active.pk])).content.decode()

    assert 'id="draft-editor"' not in body
    assert "New draft from v1" in body
    assert "Revert to v1" not in body


# -- editing a draft ------------------------------------------------------------------------------


def test_admin_adds_a_rule_with_htmx(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    response = admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {"name": "writes", "route": "audit", "side_effects": "write", "timeout_action": "reject"},
        **HTMX,
    )

    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="draft-editor"')
    assert "No problems found" in body
    names = list(
        PolicyRule.objects.filter(version=draft).order_by("position").values_list("name", flat=True)
    )
    assert names[-2:] == ["writes", "default"]
    change = PolicyChange.objects.filter(version=draft).order_by("-id").first()
    assert (change.action, change.actor_label) == ("policies.rule.added", "padmin")


def test_plain_post_redirects_back_to_the_draft(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    response = admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {"name": "writes", "route": "audit", "side_effects": "write"},
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("policies:version_detail", args=[draft.pk])


def test_invalid_values_show_inline_validation_messages(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    response = admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {
            "name": "bad",
            "route": "gate",
            "confidence_below": "1.5",
            "tools": "teleport",
            "side_effects": "telepathy",
            "approver_group": "ops",
        },
        **HTMX,
    )

    # The text a person reads: the rule's name sits in its own translate="no" element.
    body = words(response.content.decode())
    assert response.status_code == 200
    assert "rule 8 'bad' has confidence baseline 1.5, outside [0, 1]" in body
    assert "names unknown tool 'teleport'" in body
    assert "names unknown side-effect class 'telepathy'" in body
    assert "is a gate without a timeout" in body
    assert "This draft cannot be published yet: 4 errors." in body


def test_missing_default_and_shadowing_are_shown(
    admin_client: Client, draft: PolicyVersion, policy_admin: Any, tools: Any
) -> None:
    policy_rule_delete(
        rule=PolicyRule.objects.get(version=draft, name="default"), author=policy_admin
    )
    # Placed last on purpose (a new rule's default place is where it is reached).
    policy_rule_add(
        draft=draft,
        author=policy_admin,
        fields={"name": "emails", "route": "auto", "tools": ["email_customer"]},
        position=7,
    )

    page = admin_client.get(reverse("policies:version_detail", args=[draft.pk])).content.decode()
    body = words(page)

    assert "the policy has no default rule" in body
    assert (
        "rule 8 'emails' is never reached: rule 6 'notification' matches every action it matches"
    ) in body


def test_a_refused_publish_shows_the_messages_text_not_their_repr(
    admin_client: Client, draft: PolicyVersion, policy_admin: Any, tools: Any
) -> None:
    policy_rule_delete(
        rule=PolicyRule.objects.get(version=draft, name="default"), author=policy_admin
    )

    response = admin_client.post(
        reverse("policies:version_publish", args=[draft.pk]),
        {"change_note": "x", "confirm": "on"},
    )

    body = response.content.decode()
    assert response.status_code == 400
    assert "Error: the policy has no default rule" in body
    assert "ValidationMessage(" not in body and "level=" not in body


def test_duplicate_rule_name_is_a_form_error(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    response = admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]), {"name": "read", "route": "auto"}, **HTMX
    )

    assert "this draft already has a rule named &#x27;read&#x27;" in response.content.decode()
    assert PolicyRule.objects.filter(version=draft, name="read").count() == 1


def test_admin_edits_a_rule(admin_client: Client, draft: PolicyVersion, tools: Any) -> None:
    rule = PolicyRule.objects.get(version=draft, name="large payment")
    url = reverse("policies:rule_edit", args=[draft.pk, rule.pk])

    form = admin_client.get(url, **HTMX).content.decode()
    response = admin_client.post(
        url,
        {
            "name": "large payment",
            "route": "gate",
            "side_effects": "financial",
            "amount_above": "50",
            "approver_group": "finance",
            "timeout_seconds": "600",
            "timeout_action": "escalate",
            "escalate_to": "cfo",
        },
        **HTMX,
    )

    assert 'name="amount_above" value="100.0"' in form and "Change rule 4" in form
    assert response.status_code == 200
    rule.refresh_from_db()
    assert (
        rule.amount_above,
        rule.approver_group,
        rule.timeout_seconds,
        rule.timeout_action,
        rule.escalate_to,
    ) == (50.0, "finance", 600, "escalate", "cfo")


def test_admin_reorders_and_deletes_rules(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    read = PolicyRule.objects.get(version=draft, name="read")
    low = PolicyRule.objects.get(version=draft, name="low confidence")

    moved = admin_client.post(
        reverse("policies:rule_move", args=[draft.pk, read.pk]), {"position": "0"}, **HTMX
    )
    deleted = admin_client.post(reverse("policies:rule_delete", args=[draft.pk, low.pk]), **HTMX)

    assert moved.status_code == deleted.status_code == 200
    names = list(
        PolicyRule.objects.filter(version=draft).order_by("position").values_list("name", flat=True)
    )
    assert names == [
        "read",
        "unknown tool",
        "sensitive system",
        "large payment",
        "small payment",
        "notification",
        "default",
    ]


def test_admin_changes_sensitive_systems(admin_client: Client, draft: PolicyVersion) -> None:
    admin_client.post(
        reverse("policies:version_settings", args=[draft.pk]),
        {"sensitive_systems": "vault, prod-db"},
        **HTMX,
    )

    assert PolicyVersion.objects.get(pk=draft.pk).sensitive_systems == ["vault", "prod-db"]


def test_rule_of_another_version_is_not_found(admin_client: Client, draft: PolicyVersion) -> None:
    foreign = PolicyRule.objects.filter(version=policy_version_active()).first()

    response = admin_client.post(reverse("policies:rule_delete", args=[draft.pk, foreign.pk]))

    assert response.status_code == 404


def test_editing_a_published_version_is_refused(admin_client: Client, tools: Any) -> None:
    active = policy_version_active()
    rule = PolicyRule.objects.filter(version=active).first()

    response = admin_client.post(reverse("policies:rule_delete", args=[active.pk, rule.pk]), **HTMX)

    assert "is published and cannot change" in response.content.decode()
    assert PolicyRule.objects.filter(version=active).count() == 8


def test_hostile_rule_name_is_escaped(admin_client: Client, draft: PolicyVersion) -> None:
    admin_client.post(
        reverse("policies:rule_add", args=[draft.pk]),
        {"name": HOSTILE, "route": "deny", "tools": HOSTILE},
    )

    body = admin_client.get(reverse("policies:version_detail", args=[draft.pk])).content.decode()

    assert HOSTILE not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


# -- publish, revert, diff, dry-run ---------------------------------------------------------------


def test_admin_publishes_a_draft(admin_client: Client, draft: PolicyVersion, tools: Any) -> None:
    response = admin_client.post(
        reverse("policies:version_publish", args=[draft.pk]),
        {"change_note": "same rules, new number", "confirm": "on"},
        **HTMX,
    )

    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("policies:version_detail", args=[draft.pk])
    active = policy_version_active()
    assert (active.pk, active.number, active.published_by_label) == (draft.pk, 2, "padmin")


def test_publishing_an_invalid_draft_shows_why(
    admin_client: Client, draft: PolicyVersion, policy_admin: Any, tools: Any
) -> None:
    policy_rule_delete(
        rule=PolicyRule.objects.get(version=draft, name="default"), author=policy_admin
    )

    response = admin_client.post(
        reverse("policies:version_publish", args=[draft.pk]),
        {"change_note": "oops", "confirm": "on"},
    )

    body = response.content.decode()
    assert response.status_code == 400
    assert "Not published" in body and "the policy has no default rule" in body
    assert PolicyVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    assert policy_version_active().number == 1


def test_admin_reverts_to_an_earlier_version(
    admin_client: Client, draft: PolicyVersion, policy_admin: Any, tools: Any
) -> None:
    v1 = policy_version_active()
    policy_rule_delete(rule=PolicyRule.objects.get(version=draft, name="read"), author=policy_admin)
    policy_publish(draft=draft, author=policy_admin, change_note="no reads")

    response = admin_client.post(
        reverse("policies:version_revert", args=[v1.pk]),
        {"change_note": "reads were fine", "confirm": "on"},
    )

    active = policy_version_active()
    assert response.status_code == 302
    assert response["Location"] == reverse("policies:version_detail", args=[active.pk])
    assert (active.number, active.parent_id, active.change_note) == (3, v1.pk, "reads were fine")
    assert PolicyRule.objects.filter(version=active).count() == 8


def test_diff_between_two_versions(
    admin_client: Client, default_policy: Policy, draft: PolicyVersion, policy_admin: Any
) -> None:
    v1 = policy_version_active()
    admin_client.post(
        reverse(
            "policies:rule_edit",
            args=[draft.pk, PolicyRule.objects.get(version=draft, name="large payment").pk],
        ),
        {
            "name": "large payment",
            "route": "gate",
            "side_effects": "financial",
            "amount_above": "250",
            "approver_group": "operators",
            "timeout_seconds": "3600",
            "timeout_action": "reject",
        },
    )
    policy_rule_delete(rule=PolicyRule.objects.get(version=draft, name="read"), author=policy_admin)

    response = admin_client.get(
        reverse("policies:version_diff", args=[default_policy.pk]),
        {"a": v1.pk, "b": draft.pk},
        **HTMX,
    )

    body = response.content.decode()
    assert response.status_code == 200
    assert "0 added, 1 removed, 1 changed, 0 moved, 6 unchanged." in body
    assert (
        '<span translate="no">amount_above</span>: <del translate="no">100</del> → '
        '<ins translate="no">250</ins>'
    ) in body


def test_admin_dry_runs_a_draft_over_recorded_history(
    admin_client: Client, draft: PolicyVersion, tools: Any, history: list[RecordedAction]
) -> None:
    now = timezone.now()
    history.extend(
        RecordedAction(
            Action("issue_refund", "financial", ("payments",), amount=150.0, confidence=0.9),
            "audit",
            None,
            now - timedelta(hours=i),
        )
        for i in range(3)
    )
    history.append(
        RecordedAction(
            Action("lookup_order", "read", ("orders",), confidence=0.9), "auto", None, now
        )
    )

    response = admin_client.get(
        reverse("policies:version_dry_run", args=[draft.pk]), {"days": "1"}, **HTMX
    )

    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="dry-run-result"')
    assert ('<span class="route">audit</span> → <span class="route">gate</span>') in body
    assert "3 of 4" in body and '<span translate="no">large payment</span> (3)' in body
    assert "3.0 → 3.0" not in body and "0.0 → 3.0" in body
