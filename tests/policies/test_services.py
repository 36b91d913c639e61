"""Versions and rules on PostgreSQL: drafts, publish, immutability (service and trigger), revert,
the change log, the shipped default, and publishing under concurrency."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from policies.defaults import DEFAULT_RULES, DEFAULT_SENSITIVE_SYSTEMS
from policies.engine import Action
from policies.errors import PolicyError, PolicyImmutable, PolicyInvalid, RuleConflict
from policies.models import Policy, PolicyChange, PolicyRule, PolicyVersion, VersionStatus
from policies.selectors import (
    policy_evaluate,
    policy_spec_for,
    policy_version_active,
)
from policies.services import (
    RULE_FIELDS,
    policy_create,
    policy_default_install,
    policy_draft_create,
    policy_draft_settings_update,
    policy_publish,
    policy_revert,
    policy_rule_add,
    policy_rule_delete,
    policy_rule_move,
    policy_rule_update,
    policy_version_ensure_active,
)
from tests.policies.conftest import GATE, make_draft

pytestmark = pytest.mark.django_db


def rule_names(version: PolicyVersion) -> list[str]:
    return list(
        PolicyRule.objects.filter(version=version)
        .order_by("position")
        .values_list("name", flat=True)
    )


def positions(version: PolicyVersion) -> list[int]:
    return list(
        PolicyRule.objects.filter(version=version)
        .order_by("position")
        .values_list("position", flat=True)
    )


# -- the shipped default --------------------------------------------------------------------------


def test_migration_installs_the_documented_default_policy(default_policy: Policy) -> None:
    active = policy_version_active()
    rows = PolicyRule.objects.filter(version=active).order_by("position")

    assert active is not None and active.number == 1 and active.policy == default_policy
    assert active.sensitive_systems == DEFAULT_SENSITIVE_SYSTEMS
    defaults = {f: PolicyRule._meta.get_field(f).get_default() for f in RULE_FIELDS}
    assert [{f: getattr(r, f) for f in RULE_FIELDS} for r in rows] == [
        {**defaults, **rule} for rule in DEFAULT_RULES
    ]


def test_migration_creates_the_policy_admins_group() -> None:
    from django.contrib.auth.models import Group

    perms = set(
        Group.objects.get(name="policy admins").permissions.values_list("codename", flat=True)
    )

    assert {
        "publish_policyversion",
        "add_policyrule",
        "change_policyrule",
        "delete_policyrule",
        "add_policyversion",
    } <= perms


def test_default_install_is_idempotent(default_policy: Policy) -> None:
    first = policy_default_install()
    second = policy_default_install()

    assert first.pk == second.pk == policy_version_active().pk
    assert PolicyVersion.objects.filter(policy=default_policy).count() == 1


def test_pin_reinstalls_the_default_in_a_flushed_database() -> None:
    with connection.cursor() as cursor:
        # As Django's flush of a test database does (the record's tables refuse TRUNCATE else).
        cursor.execute("SET LOCAL agentops.erasing = 'on'")
        cursor.execute(
            "TRUNCATE policies_policychange, policies_policyrule, "
            "policies_policyversion, policies_policy CASCADE"
        )

    pinned = policy_version_ensure_active()

    assert (pinned.policy.name, pinned.number) == ("default", 1)
    assert rule_names(pinned) == [r["name"] for r in DEFAULT_RULES]
    assert (
        policy_evaluate(
            version_id=pinned.pk, action=Action("issue_refund", "financial", amount=150.0)
        ).route
        == "gate"
    )


def test_pin_of_unknown_policy_raises() -> None:
    with pytest.raises(PolicyError, match="no published version"):
        policy_version_ensure_active(policy_name="nope")


# -- drafts ---------------------------------------------------------------------------------------


def test_draft_copies_the_active_version(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    assert draft.status == VersionStatus.DRAFT and draft.number is None
    assert draft.parent == policy_version_active()
    assert rule_names(draft) == [r["name"] for r in DEFAULT_RULES]
    assert draft.sensitive_systems == DEFAULT_SENSITIVE_SYSTEMS
    change = PolicyChange.objects.get(version=draft)
    assert (change.action, change.actor_label, change.detail) == (
        "policies.draft.created",
        "ada",
        {"from_version": 1, "rules": 8},
    )


def test_rule_add_goes_before_the_default_by_default(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    policy_rule_add(
        draft=draft,
        author=author,
        fields={"name": "writes", "route": "audit", "side_effects": "write"},
    )

    assert rule_names(draft)[-2:] == ["writes", "default"]
    assert positions(draft) == list(range(9))
    assert PolicyRule.objects.get(version=draft, name="writes").side_effects == ["write"]


def test_rule_add_at_a_position_shifts_the_rest(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    policy_rule_add(
        draft=draft,
        author=author,
        position=0,
        fields={"name": "deny prod", "route": "deny", "systems": ["prod-db"]},
    )

    assert rule_names(draft)[:3] == ["deny prod", "unknown tool", "low confidence"]
    assert positions(draft) == list(range(9))


def test_rule_names_are_unique_in_a_draft(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    rule = PolicyRule.objects.get(version=draft, name="read")

    with pytest.raises(RuleConflict):
        policy_rule_add(draft=draft, author=author, fields={"name": "read", "route": "auto"})
    with pytest.raises(RuleConflict):
        policy_rule_update(rule=rule, author=author, fields={"name": "notification"})
    assert rule_names(draft).count("read") == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "x", "route": "gate", "amount_above": "lots"}, "amount above must be a number"),
        ({"name": "x", "route": "maybe"}, "route must be one of"),
        ({"name": "", "route": "auto"}, "a rule needs a name"),
        ({"name": "x", "route": "auto", "colour": "red"}, "unknown rule fields: colour"),
    ],
)
def test_rule_add_refuses_values_it_cannot_store(
    default_policy: Policy, author: Any, fields: dict[str, Any], message: str
) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    with pytest.raises(PolicyError, match=message):
        policy_rule_add(draft=draft, author=author, fields=fields)

    assert PolicyRule.objects.filter(version=draft).count() == 8


def test_rule_update_records_before_and_after(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    rule = PolicyRule.objects.get(version=draft, name="large payment")

    updated = policy_rule_update(
        rule=rule, author=author, fields={"amount_above": "250", "approver_group": "finance"}
    )

    assert (updated.amount_above, updated.approver_group) == (250.0, "finance")
    change = PolicyChange.objects.filter(version=draft).order_by("-id").first()
    assert change.action == "policies.rule.updated"
    assert change.detail == {
        "rule": "large payment",
        "changed": {"amount_above": [100.0, 250.0], "approver_group": ["operators", "finance"]},
    }


def test_rule_update_without_changes_records_nothing(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    rule = PolicyRule.objects.get(version=draft, name="read")
    before = PolicyChange.objects.count()

    policy_rule_update(rule=rule, author=author, fields={"route": "auto", "sample_rate": 0.05})

    assert PolicyChange.objects.count() == before


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (0, ["read", "unknown tool", "low confidence"]),
        (2, ["unknown tool", "low confidence", "read"]),
    ],
)
def test_rule_move(default_policy: Policy, author: Any, target: int, expected: list[str]) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    rule = PolicyRule.objects.get(version=draft, name="read")

    moved = policy_rule_move(rule=rule, author=author, position=target)

    assert moved.position == target
    assert rule_names(draft)[:3] == expected
    assert positions(draft) == list(range(8))
    assert PolicyChange.objects.filter(version=draft, action="policies.rule.moved").count() == 1


def test_rule_move_clamps_to_the_end(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    rule = PolicyRule.objects.get(version=draft, name="unknown tool")

    policy_rule_move(rule=rule, author=author, position=99)

    assert rule_names(draft)[-1] == "unknown tool"
    assert positions(draft) == list(range(8))


def test_rule_delete_closes_the_gap(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    policy_rule_delete(
        rule=PolicyRule.objects.get(version=draft, name="low confidence"), author=author
    )

    assert "low confidence" not in rule_names(draft)
    assert positions(draft) == list(range(7))
    change = PolicyChange.objects.filter(version=draft).order_by("-id").first()
    assert (change.action, change.detail["rule"], change.detail["position"]) == (
        "policies.rule.deleted",
        "low confidence",
        2,
    )


def test_settings_update_replaces_sensitive_systems(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    policy_draft_settings_update(
        draft=draft, author=author, sensitive_systems=["vault", " ", "vault", "identity"]
    )

    assert PolicyVersion.objects.get(pk=draft.pk).sensitive_systems == ["vault", "identity"]


# -- publish --------------------------------------------------------------------------------------


def test_publish_makes_the_draft_the_next_active_version(
    default_policy: Policy, author: Any, tools: Any
) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    policy_rule_update(
        rule=PolicyRule.objects.get(version=draft, name="large payment"),
        author=author,
        fields={"amount_above": 50},
    )

    published = policy_publish(draft=draft, author=author, change_note="lower the bar")

    assert (published.number, published.status, published.change_note) == (
        2,
        VersionStatus.PUBLISHED,
        "lower the bar",
    )
    assert published.published_by_label == "ada" and published.published_at is not None
    assert policy_version_active() == published
    verdict = policy_evaluate(
        version_id=published.pk, action=Action("issue_refund", "financial", amount=75.0)
    )
    assert (verdict.route, verdict.rule, verdict.version) == ("gate", "large payment", 2)
    change = PolicyChange.objects.filter(version=published).order_by("-id").first()
    assert (change.action, change.detail["number"]) == ("policies.version.published", 2)


def test_publish_refuses_an_invalid_draft_with_every_message(
    default_policy: Policy, author: Any, tools: Any
) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)
    policy_rule_update(
        rule=PolicyRule.objects.get(version=draft, name="low confidence"),
        author=author,
        fields={"confidence_below": 1.5},
    )
    policy_rule_add(
        draft=draft,
        author=author,
        fields={
            "name": "refunds",
            "route": "gate",
            "tools": ["issue_refund", "teleport"],
            "approver_group": "ops",
        },
    )
    policy_rule_add(
        draft=draft,
        author=author,
        fields={"name": "emails", "route": "auto", "tools": ["email_customer"]},
        position=8,  # after "notification", on purpose: it is shadowed
    )
    policy_rule_delete(rule=PolicyRule.objects.get(version=draft, name="default"), author=author)

    with pytest.raises(PolicyInvalid) as raised:
        policy_publish(draft=draft, author=author, change_note="broken")

    assert sorted((m.code, m.rule) for m in raised.value.messages if m.is_error) == [
        ("confidence_out_of_range", "low confidence"),
        ("gate_without_timeout", "refunds"),
        ("missing_default", None),
        ("shadowed", "emails"),
        ("unknown_tool", "refunds"),
    ]
    assert PolicyVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    assert policy_version_active().number == 1


def test_publish_needs_a_change_note(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    with pytest.raises(PolicyError, match="change note"):
        policy_publish(draft=draft, author=author, change_note="  ")


def test_published_version_refuses_every_service_edit(default_policy: Policy, author: Any) -> None:
    active = policy_version_active()
    rule = PolicyRule.objects.filter(version=active).first()

    with pytest.raises(PolicyImmutable):
        policy_rule_add(draft=active, author=author, fields={"name": "x", "route": "auto"})
    with pytest.raises(PolicyImmutable):
        policy_rule_update(rule=rule, author=author, fields={"route": "deny"})
    with pytest.raises(PolicyImmutable):
        policy_rule_delete(rule=rule, author=author)
    with pytest.raises(PolicyImmutable):
        policy_rule_move(rule=rule, author=author, position=5)
    with pytest.raises(PolicyImmutable):
        policy_draft_settings_update(draft=active, author=author, sensitive_systems=[])
    with pytest.raises(PolicyImmutable):
        policy_publish(draft=active, author=author, change_note="again")
    assert rule_names(active) == [r["name"] for r in DEFAULT_RULES]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE policies_policyversion SET change_note = 'rewritten' WHERE id = %s",
        "UPDATE policies_policyversion SET status = 'draft', number = NULL, published_at = NULL "
        "WHERE id = %s",
        "DELETE FROM policies_policyversion WHERE id = %s",
        "UPDATE policies_policyrule SET route = 'auto' WHERE version_id = %s",
        "DELETE FROM policies_policyrule WHERE version_id = %s",
        "INSERT INTO policies_policyrule (version_id, position, name, route, tools, side_effects, "
        "systems, touches_sensitive, agents, unknown_tool, is_default, approver_group, "
        "timeout_action, escalate_to) VALUES (%s, 50, 'sneaky', 'auto', '[]', '[]', '[]', false, "
        "'[]', false, false, '', 'reject', '')",
    ],
)
def test_database_rejects_changes_to_a_published_version(sql: str) -> None:
    active = policy_version_active()

    with (
        pytest.raises(IntegrityError, match="published"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [active.pk])

    assert PolicyVersion.objects.get(pk=active.pk).change_note == "Shipped default policy."
    assert rule_names(active) == [r["name"] for r in DEFAULT_RULES]


def test_database_allows_raw_changes_to_a_draft(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE policies_policyrule SET route = 'deny' WHERE version_id = %s", [draft.pk]
        )

    assert set(PolicyRule.objects.filter(version=draft).values_list("route", flat=True)) == {"deny"}


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE policies_policychange SET actor_label = 'mallory'",
        "DELETE FROM policies_policychange",
    ],
)
def test_change_log_is_append_only(sql: str) -> None:
    before = PolicyChange.objects.count()

    with (
        pytest.raises(IntegrityError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)

    assert before >= 1 and PolicyChange.objects.count() == before


def test_spec_of_a_published_version_is_cached_and_a_drafts_is_not(
    default_policy: Policy, author: Any
) -> None:
    active = policy_version_active()
    draft = policy_draft_create(policy=default_policy, author=author)

    assert policy_spec_for(active.pk) is policy_spec_for(active.pk)
    first = policy_spec_for(draft.pk)
    policy_rule_delete(rule=PolicyRule.objects.get(version=draft, name="read"), author=author)
    assert len(first.rules) == 8 and len(policy_spec_for(draft.pk).rules) == 7


# -- revert ---------------------------------------------------------------------------------------


def test_revert_publishes_a_copy_as_a_new_version(
    default_policy: Policy, author: Any, tools: Any
) -> None:
    v1 = policy_version_active()
    draft = policy_draft_create(policy=default_policy, author=author)
    policy_rule_delete(
        rule=PolicyRule.objects.get(version=draft, name="low confidence"), author=author
    )
    v2 = policy_publish(draft=draft, author=author, change_note="drop confidence rule")

    v3 = policy_revert(
        policy=default_policy,
        to_version=v1,
        author=author,
        change_note="confidence rule was needed",
    )

    assert (v3.number, v3.parent_id, v3.status) == (3, v1.pk, VersionStatus.PUBLISHED)
    assert policy_version_active() == v3
    assert rule_names(v3) == rule_names(v1)
    assert "low confidence" not in rule_names(v2)
    assert PolicyVersion.objects.filter(policy=default_policy, status="published").count() == 3
    change = PolicyChange.objects.get(version=v3)
    assert (change.action, change.detail["to_version"], change.detail["number"]) == (
        "policies.version.reverted",
        1,
        3,
    )


def test_revert_refuses_a_draft(default_policy: Policy, author: Any) -> None:
    draft = policy_draft_create(policy=default_policy, author=author)

    with pytest.raises(PolicyError, match="published"):
        policy_revert(policy=default_policy, to_version=draft, author=author, change_note="x")


# -- concurrency ----------------------------------------------------------------------------------


def _publish_concurrently(drafts: list[PolicyVersion], author: Any) -> list[Any]:
    barrier = threading.Barrier(len(drafts))
    results: list[Any] = [None] * len(drafts)

    def publish(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = policy_publish(draft=drafts[i], author=author, change_note=f"d{i}")
        except Exception as exc:  # the test inspects whatever the publish raised
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(len(drafts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_publishes_get_unique_numbers_and_one_active(author: Any) -> None:
    policy = policy_create(name="concurrent", author=author)
    drafts = [
        make_draft(
            policy=policy,
            author=author,
            rules=[{"name": "default", "route": "gate", "is_default": True, **GATE}],
        )
        for _ in range(4)
    ]

    results = _publish_concurrently(drafts, author)

    assert all(isinstance(r, PolicyVersion) for r in results), results
    numbers = sorted(r.number for r in results)
    assert numbers == [1, 2, 3, 4]
    assert policy_version_active("concurrent").number == 4
    assert PolicyVersion.objects.filter(policy=policy, status="published").count() == 4
    assert (
        PolicyChange.objects.filter(policy=policy, action="policies.version.published").count() == 4
    )


@pytest.mark.django_db(transaction=True)
def test_the_same_draft_published_twice_concurrently_is_published_once(author: Any) -> None:
    policy = policy_create(name="twice", author=author)
    draft = make_draft(
        policy=policy,
        author=author,
        rules=[{"name": "default", "route": "gate", "is_default": True, **GATE}],
    )

    results = _publish_concurrently([draft, draft], author)

    assert sorted(type(r).__name__ for r in results) == ["PolicyImmutable", "PolicyVersion"]
    assert list(PolicyVersion.objects.filter(policy=policy).values_list("number", flat=True)) == [1]
