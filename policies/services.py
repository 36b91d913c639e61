"""Every write to policies: drafts, rule edits, publish, revert. Each service owns its transaction.

Only drafts change. A service that edits a draft locks its version row first and refuses if it
is no longer a draft; publish and revert lock the policy row, then the version row (always in
that order), so concurrent publishes get consecutive numbers and exactly one is the latest.
Every change is appended to `PolicyChange` in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Case, F, Max, Value, When
from django.utils import timezone

from policies import catalog
from policies.defaults import (
    DEFAULT_CHANGE_NOTE,
    DEFAULT_POLICY_DESCRIPTION,
    DEFAULT_POLICY_NAME,
    DEFAULT_RULES,
    DEFAULT_SENSITIVE_SYSTEMS,
)
from policies.engine import TIMEOUT_ACTIONS, Route
from policies.errors import (
    PolicyError,
    PolicyImmutable,
    PolicyInvalid,
    PolicyNotFound,
    RuleConflict,
)
from policies.models import Policy, PolicyChange, PolicyRule, PolicyVersion, VersionStatus
from policies.phrases import Phrase, gettext_noop
from policies.selectors import (
    policy_spec_of,
    policy_version_active,
    policy_version_validate,
    rule_from_row,
)
from policies.validation import reached_position

if TYPE_CHECKING:
    from django.contrib.auth.models import User

LIST_FIELDS = ("tools", "side_effects", "systems", "agents")
FLOAT_FIELDS = ("amount_above", "confidence_below", "sample_rate")
INT_FIELDS = ("step_at_least", "step_at_most", "timeout_seconds", "approvals_required")
BOOL_FIELDS = ("touches_sensitive", "unknown_tool", "is_default")
TEXT_FIELDS = ("name", "approver_group", "escalate_to", "second_approver_group")
RULE_FIELDS = (
    "name",
    "route",
    *LIST_FIELDS,
    "touches_sensitive",
    "amount_above",
    "confidence_below",
    "step_at_least",
    "step_at_most",
    "edited",
    "unknown_tool",
    "is_default",
    "sample_rate",
    "approver_group",
    "timeout_seconds",
    "timeout_action",
    "escalate_to",
    "approvals_required",
    "second_approver_group",
)
APPROVALS_COLUMN_MAX = 32767  # PolicyRule.approvals_required is a small integer
# Positions move through this range while a draft is renumbered, so no two rows ever collide.
_RENUMBER_OFFSET = 1_000_000


def _label(user: User | None) -> str:
    if user is not None and getattr(user, "pk", None):
        return user.get_username()
    return "system"


def _user(user: User | None) -> User | None:
    return user if user is not None and getattr(user, "pk", None) else None


def _record(
    *,
    policy: Policy,
    version: PolicyVersion | None,
    action: str,
    actor: User | None,
    detail: dict[str, Any],
) -> PolicyChange:
    return PolicyChange.objects.create(
        policy=policy,
        version=version,
        action=action,
        actor=_user(actor),
        actor_label=_label(actor),
        detail=detail,
    )


def _locked_draft(version_id: int) -> PolicyVersion:
    """Lock the version row; raise PolicyImmutable unless it is a draft. Caller is atomic."""
    version = PolicyVersion.objects.select_for_update().select_related("policy").get(pk=version_id)
    if version.status == VersionStatus.DISCARDED:
        raise PolicyImmutable(
            Phrase(
                gettext_noop("%(policy)s %(version)s was discarded"),
                {"policy": version.policy.name, "version": version.label},
            )
        )
    if version.status != VersionStatus.DRAFT:
        raise PolicyImmutable(
            Phrase(
                gettext_noop(
                    "%(policy)s %(version)s is published and cannot change; create a draft from "
                    "it instead"
                ),
                {"policy": version.policy.name, "version": version.label},
            )
        )
    return version


def rule_fields_clean(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Normalize rule fields to the column types. Ranges are left to `validate`, which reports
    them on the draft; only values that cannot be stored at all raise PolicyError."""
    unknown = set(fields) - set(RULE_FIELDS)
    if unknown:
        raise PolicyError(
            Phrase(
                gettext_noop("unknown rule fields: %(fields)s"),
                {"fields": ", ".join(sorted(unknown))},
            )
        )
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in LIST_FIELDS:
            items = value.split(",") if isinstance(value, str) else list(value or ())
            cleaned = [str(v).strip() for v in items if str(v).strip()]
            out[key] = list(dict.fromkeys(cleaned))
        elif key in FLOAT_FIELDS or key in INT_FIELDS:
            out[key] = _number(key, value, float if key in FLOAT_FIELDS else int)
        elif key in BOOL_FIELDS:
            out[key] = bool(value)
        elif key == "edited":
            out[key] = None if value is None or value == "" else bool(value)
        else:
            out[key] = str(value or "").strip()
    if "route" in out and out["route"] not in Route.values:
        raise PolicyError(
            Phrase(gettext_noop("route must be one of %(routes)s"), {"routes": ", ".join(Route)})
        )
    if "timeout_action" in out:
        out["timeout_action"] = out["timeout_action"] or "reject"
        if out["timeout_action"] not in TIMEOUT_ACTIONS:
            raise PolicyError(
                Phrase(
                    gettext_noop("timeout action must be one of %(actions)s"),
                    {"actions": ", ".join(TIMEOUT_ACTIONS)},
                )
            )
    if "name" in out and not out["name"]:
        raise PolicyError(Phrase(gettext_noop("a rule needs a name")))
    if out.get("timeout_seconds") is not None and out["timeout_seconds"] < 0:
        raise PolicyError(Phrase(gettext_noop("timeout seconds must be 0 or more")))
    if "approvals_required" in out:
        out["approvals_required"] = _approvals(out["approvals_required"])
    return out


def _approvals(value: int | None) -> int:
    """Empty is one approval; what a small column cannot hold is refused (other counts are
    left to `validate`, which names them on the draft)."""
    if value is None:
        return 1
    if not 0 <= value <= APPROVALS_COLUMN_MAX:
        raise PolicyError(
            Phrase(gettext_noop("approvals must be 1, or 2 for two different people"))
        )
    return value


def _number(key: str, value: Any, kind: type[float] | type[int]) -> float | int | None:
    if value is None or value == "":
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise PolicyError(
            Phrase(
                gettext_noop("%(field)s must be a number, not %(value)s"),
                {"field": key.replace("_", " "), "value": repr(value)},
            )
        ) from None


def _rule_values(row: PolicyRule) -> dict[str, Any]:
    return {key: getattr(row, key) for key in RULE_FIELDS}


def _renumber(version: PolicyVersion, ordered_ids: list[int | None]) -> None:
    """Give the rules of `version` their index in `ordered_ids` as position; a None leaves that
    position free for a rule about to be inserted. Caller holds the draft's lock."""
    rules = PolicyRule.objects.filter(version=version)
    rules.update(position=F("position") + _RENUMBER_OFFSET)
    whens = [When(pk=pk, then=Value(i)) for i, pk in enumerate(ordered_ids) if pk is not None]
    if whens:
        rules.update(position=Case(*whens))


def _ordered_ids(version: PolicyVersion) -> list[int | None]:
    return list(
        PolicyRule.objects.filter(version=version).order_by("position").values_list("pk", flat=True)
    )


def _ensure_unique_name(version: PolicyVersion, name: str, *, exclude: int | None = None) -> None:
    clash = PolicyRule.objects.filter(version=version, name=name)
    if exclude is not None:
        clash = clash.exclude(pk=exclude)
    if clash.exists():
        raise RuleConflict(
            Phrase(
                gettext_noop("this draft already has a rule named %(name)s"), {"name": repr(name)}
            )
        )


def _copy_rules(source: PolicyVersion | None, target: PolicyVersion) -> int:
    if source is None:
        return 0
    rows = [
        PolicyRule(version=target, position=row.position, **_rule_values(row))
        for row in PolicyRule.objects.filter(version=source).order_by("position")
    ]
    PolicyRule.objects.bulk_create(rows)
    return len(rows)


# -- drafts ---------------------------------------------------------------------------------------


def policy_create(*, name: str, description: str = "", author: User | None = None) -> Policy:
    """Create an empty policy (no versions yet)."""
    with transaction.atomic():
        policy = Policy.objects.create(name=name, description=description)
        _record(
            policy=policy,
            version=None,
            action="policies.policy.created",
            actor=author,
            detail={"name": name},
        )
    return policy


def policy_draft_create(
    *, policy: Policy, author: User, from_version: PolicyVersion | None = None
) -> PolicyVersion:
    """A new draft holding a copy of `from_version` (default: the active version, if any)."""
    with transaction.atomic():
        source = from_version or policy_version_active(policy.name)
        if source is not None and source.policy_id != policy.pk:
            raise PolicyError(
                Phrase(
                    gettext_noop("%(policy)s %(version)s belongs to another policy"),
                    {"policy": source.policy.name, "version": source.label},
                )
            )
        draft = PolicyVersion.objects.create(
            policy=policy,
            sensitive_systems=list(source.sensitive_systems) if source else [],
            author=_user(author),
            author_label=_label(author),
            parent=source,
        )
        copied = _copy_rules(source, draft)
        _record(
            policy=policy,
            version=draft,
            action="policies.draft.created",
            actor=author,
            detail={"from_version": source.number if source else None, "rules": copied},
        )
    return draft


def policy_draft_discard(*, draft: PolicyVersion, author: User) -> PolicyVersion:
    """Give up a draft: it is marked discarded (its change log keeps pointing at it), leaves the
    list of drafts and can no longer be edited or published. Raises PolicyImmutable for a
    published version (or one already discarded)."""
    with transaction.atomic():
        locked = _locked_draft(draft.pk)
        PolicyVersion.objects.filter(pk=locked.pk, status=VersionStatus.DRAFT).update(
            status=VersionStatus.DISCARDED
        )
        _record(
            policy=locked.policy,
            version=locked,
            action="policies.draft.discarded",
            actor=author,
            detail={"rules": PolicyRule.objects.filter(version=locked).count()},
        )
        locked.status = VersionStatus.DISCARDED
    return locked


def policy_draft_settings_update(
    *, draft: PolicyVersion, author: User, sensitive_systems: list[str]
) -> PolicyVersion:
    """Replace the draft's list of sensitive systems."""
    cleaned = list(dict.fromkeys(s.strip() for s in sensitive_systems if s.strip()))
    with transaction.atomic():
        locked = _locked_draft(draft.pk)
        before = list(locked.sensitive_systems)
        PolicyVersion.objects.filter(pk=locked.pk).update(sensitive_systems=cleaned)
        _record(
            policy=locked.policy,
            version=locked,
            action="policies.draft.settings_changed",
            actor=author,
            detail={"sensitive_systems": [before, cleaned]},
        )
        locked.sensitive_systems = cleaned
    return locked


def policy_rule_add(
    *, draft: PolicyVersion, author: User, fields: Mapping[str, Any], position: int | None = None
) -> PolicyRule:
    """Insert a rule at `position` (0-based). By default it goes where it is reached: just
    before the first rule that matches every action it matches (first match wins), which is the
    default rule when no earlier rule does, so the default stays last."""
    values = rule_fields_clean(fields)
    if "name" not in values or "route" not in values:
        raise PolicyError(Phrase(gettext_noop("a rule needs a name and a route")))
    with transaction.atomic():
        locked = _locked_draft(draft.pk)
        _ensure_unique_name(locked, values["name"])
        ids = _ordered_ids(locked)
        if position is None:
            position = _reached_position(locked, values)
        position = max(0, min(position, len(ids)))
        _renumber(locked, [*ids[:position], None, *ids[position:]])
        rule = PolicyRule.objects.create(version=locked, position=position, **values)
        _record(
            policy=locked.policy,
            version=locked,
            action="policies.rule.added",
            actor=author,
            detail={"rule": rule.name, "position": position + 1, "fields": _rule_values(rule)},
        )
    return rule


def _reached_position(draft: PolicyVersion, values: Mapping[str, Any]) -> int:
    """Where a new rule with `values` is reached in `draft` (see `reached_position`)."""
    spec = policy_spec_of(draft)
    tools = catalog.known_tools() if catalog.is_registered() else None
    new = rule_from_row(PolicyRule(**values))
    return reached_position(spec.rules, new, tools, spec.sensitive_systems)


def policy_rule_update(*, rule: PolicyRule, author: User, fields: Mapping[str, Any]) -> PolicyRule:
    """Change some fields of a draft's rule; records each field's before and after."""
    values = rule_fields_clean(fields)
    with transaction.atomic():
        locked = _locked_draft(rule.version_id)
        row = PolicyRule.objects.get(pk=rule.pk, version=locked)
        if "name" in values:
            _ensure_unique_name(locked, values["name"], exclude=row.pk)
        before = _rule_values(row)
        changed = {k: [before[k], v] for k, v in values.items() if before[k] != v}
        if changed:
            PolicyRule.objects.filter(pk=row.pk).update(**values)
            _record(
                policy=locked.policy,
                version=locked,
                action="policies.rule.updated",
                actor=author,
                detail={"rule": before["name"], "changed": changed},
            )
        row.refresh_from_db()
    return row


def policy_rule_delete(*, rule: PolicyRule, author: User) -> None:
    with transaction.atomic():
        locked = _locked_draft(rule.version_id)
        row = PolicyRule.objects.get(pk=rule.pk, version=locked)
        values = _rule_values(row)
        position = row.position
        row.delete()
        _renumber(locked, _ordered_ids(locked))
        _record(
            policy=locked.policy,
            version=locked,
            action="policies.rule.deleted",
            actor=author,
            detail={"rule": values["name"], "position": position + 1, "fields": values},
        )


def policy_rule_move(*, rule: PolicyRule, author: User, position: int) -> PolicyRule:
    """Move a draft's rule to `position` (0-based, clamped to the list)."""
    with transaction.atomic():
        locked = _locked_draft(rule.version_id)
        row = PolicyRule.objects.get(pk=rule.pk, version=locked)
        ids = [pk for pk in _ordered_ids(locked) if pk != row.pk]
        target = max(0, min(position, len(ids)))
        if target != row.position:
            _renumber(locked, [*ids[:target], row.pk, *ids[target:]])
            _record(
                policy=locked.policy,
                version=locked,
                action="policies.rule.moved",
                actor=author,
                detail={"rule": row.name, "from": row.position + 1, "to": target + 1},
            )
        row.refresh_from_db()
    return row


# -- publish and revert ---------------------------------------------------------------------------


def _publish_locked(
    *,
    policy: Policy,
    draft: PolicyVersion,
    author: User | None,
    change_note: str,
    action: str,
    detail: dict[str, Any],
) -> PolicyVersion:
    """Validate and publish `draft` as the policy's next number. Caller holds the policy row lock
    and the draft row lock, inside one transaction."""
    messages = policy_version_validate(draft)
    if any(m.is_error for m in messages):
        raise PolicyInvalid(messages)
    latest = PolicyVersion.objects.filter(policy=policy).aggregate(n=Max("number"))["n"] or 0
    number = latest + 1
    published = PolicyVersion.objects.filter(pk=draft.pk, status=VersionStatus.DRAFT).update(
        status=VersionStatus.PUBLISHED,
        number=number,
        published_at=timezone.now(),
        change_note=change_note,
        published_by=_user(author),
        published_by_label=_label(author),
    )
    if published != 1:
        raise PolicyImmutable(
            Phrase(
                gettext_noop("%(version)s was published by someone else"), {"version": draft.label}
            )
        )
    version = PolicyVersion.objects.select_related("policy").get(pk=draft.pk)
    _record(
        policy=policy,
        version=version,
        action=action,
        actor=author,
        detail={"number": number, "change_note": change_note, **detail},
    )
    return version


def policy_publish(*, draft: PolicyVersion, author: User, change_note: str) -> PolicyVersion:
    """Publish a valid draft as the next version number; it becomes the active version.

    Raises PolicyInvalid (with every validation message) when the draft has errors, and
    PolicyImmutable when it is already published.
    """
    change_note = change_note.strip()
    if not change_note:
        raise PolicyError(Phrase(gettext_noop("publishing needs a change note")))
    with transaction.atomic():
        policy = Policy.objects.select_for_update().get(pk=draft.policy_id)
        locked = _locked_draft(draft.pk)
        rules = PolicyRule.objects.filter(version=locked).count()
        return _publish_locked(
            policy=policy,
            draft=locked,
            author=author,
            change_note=change_note,
            action="policies.version.published",
            detail={"rules": rules, "parent": locked.parent.number if locked.parent else None},
        )


def policy_revert(
    *, policy: Policy, to_version: PolicyVersion, author: User, change_note: str
) -> PolicyVersion:
    """Publish a copy of the earlier published `to_version` as a new version (history is kept)."""
    change_note = change_note.strip()
    if not change_note:
        raise PolicyError(Phrase(gettext_noop("reverting needs a change note")))
    if to_version.policy_id != policy.pk:
        raise PolicyError(
            Phrase(
                gettext_noop("%(policy)s %(version)s belongs to another policy"),
                {"policy": to_version.policy.name, "version": to_version.label},
            )
        )
    if to_version.status != VersionStatus.PUBLISHED:
        raise PolicyError(Phrase(gettext_noop("only a published version can be reverted to")))
    with transaction.atomic():
        locked_policy = Policy.objects.select_for_update().get(pk=policy.pk)
        draft = PolicyVersion.objects.create(
            policy=locked_policy,
            sensitive_systems=list(to_version.sensitive_systems),
            author=_user(author),
            author_label=_label(author),
            parent=to_version,
        )
        _copy_rules(to_version, draft)
        draft = PolicyVersion.objects.select_for_update().get(pk=draft.pk)
        return _publish_locked(
            policy=locked_policy,
            draft=draft,
            author=author,
            change_note=change_note,
            action="policies.version.reverted",
            detail={"to_version": to_version.number},
        )


# -- the shipped default --------------------------------------------------------------------------


def policy_default_install() -> PolicyVersion:
    """Install the shipped default policy unless it already has a published version.

    The data migration installs it; this reinstalls it where those rows are gone (a flushed
    test database). Idempotent under concurrency: the policy row is created or locked first.
    """
    return policy_install(
        name=DEFAULT_POLICY_NAME,
        description=DEFAULT_POLICY_DESCRIPTION,
        rules=DEFAULT_RULES,
        sensitive_systems=DEFAULT_SENSITIVE_SYSTEMS,
        change_note=DEFAULT_CHANGE_NOTE,
    )


def policy_install(
    *,
    name: str,
    description: str,
    rules: list[dict[str, Any]],
    sensitive_systems: list[str],
    change_note: str,
) -> PolicyVersion:
    """Install the policy `name` with `rules`, published by the system, unless it already has a
    published version (then that one). Idempotent under concurrency: the policy row is created
    or locked first."""
    with transaction.atomic():
        policy, _ = Policy.objects.get_or_create(name=name, defaults={"description": description})
        policy = Policy.objects.select_for_update().get(pk=policy.pk)
        active = policy_version_active(policy.name)
        if active is not None:
            return active
        draft = PolicyVersion.objects.create(
            policy=policy, sensitive_systems=list(sensitive_systems), author_label="system"
        )
        PolicyRule.objects.bulk_create(
            PolicyRule(version=draft, position=i, **rule_fields_clean(fields))
            for i, fields in enumerate(rules)
        )
        draft = PolicyVersion.objects.select_for_update().get(pk=draft.pk)
        return _publish_locked(
            policy=policy,
            draft=draft,
            author=None,
            change_note=change_note,
            action="policies.version.published",
            detail={"rules": len(rules), "parent": None},
        )


def policy_version_ensure_active(*, policy_name: str = DEFAULT_POLICY_NAME) -> PolicyVersion:
    """The policy's active version (the caller pins it on a new task). The shipped default
    policy is installed first when it is missing, so this may write; any other policy must
    exist already (PolicyNotFound)."""
    active = policy_version_active(policy_name)
    if active is not None:
        return active
    if policy_name == DEFAULT_POLICY_NAME:
        return policy_default_install()
    raise PolicyNotFound(
        Phrase(
            gettext_noop("policy %(policy)s has no published version"),
            {"policy": repr(policy_name)},
        )
    )
