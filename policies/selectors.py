"""Reads: the active version, specs built from rows, validation of a version, lists for pages.

`policy_spec_for` caches the spec of a published version by id for the life of the process: a
published version never changes (the database rejects it), so the cache cannot go stale. Drafts
are rebuilt on every call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from policies import catalog
from policies.dryrun import DryRunResult, dry_run
from policies.engine import Action, PolicySpec, Rule, ValidationMessage, Verdict, evaluate
from policies.errors import PolicyNotFound
from policies.models import Policy, PolicyChange, PolicyRule, PolicyVersion, VersionStatus
from policies.validation import validate

_SPEC_CACHE: dict[int, PolicySpec] = {}
_SPEC_CACHE_MAX = 256
_spec_lock = threading.Lock()


def rule_from_row(row: PolicyRule) -> Rule:
    return Rule(
        name=row.name,
        route=row.route,
        tools=tuple(row.tools or ()),
        side_effects=tuple(row.side_effects or ()),
        systems=tuple(row.systems or ()),
        touches_sensitive=row.touches_sensitive,
        amount_above=row.amount_above,
        confidence_below=row.confidence_below,
        agents=tuple(row.agents or ()),
        step_at_least=row.step_at_least,
        step_at_most=row.step_at_most,
        edited=row.edited,
        unknown_tool=row.unknown_tool,
        is_default=row.is_default,
        sample_rate=row.sample_rate,
        approver_group=row.approver_group,
        timeout_seconds=row.timeout_seconds,
        timeout_action=row.timeout_action,
        escalate_to=row.escalate_to,
        approvals_required=row.approvals_required,
        second_approver_group=row.second_approver_group,
    )


def policy_spec_of(version: PolicyVersion, rows: Iterable[PolicyRule] | None = None) -> PolicySpec:
    """Build the spec of `version` from its rule rows (given, or read in position order)."""
    if rows is None:
        rows = PolicyRule.objects.filter(version=version).order_by("position")
    return PolicySpec(
        version=version.number,
        rules=tuple(rule_from_row(r) for r in sorted(rows, key=lambda r: r.position)),
        sensitive_systems=tuple(version.sensitive_systems or ()),
        version_id=version.pk,
        policy=version.policy.name,
    )


def policy_spec_for(version_id: int) -> PolicySpec:
    """The spec of a version by id; cached once the version is published."""
    cached = _SPEC_CACHE.get(version_id)
    if cached is not None:
        return cached
    try:
        version = PolicyVersion.objects.select_related("policy").get(pk=version_id)
    except PolicyVersion.DoesNotExist:
        raise PolicyNotFound(f"policy version {version_id} does not exist") from None
    spec = policy_spec_of(version)
    if version.status == VersionStatus.PUBLISHED:
        with _spec_lock:
            if len(_SPEC_CACHE) >= _SPEC_CACHE_MAX:
                _SPEC_CACHE.clear()
            _SPEC_CACHE[version_id] = spec
    return spec


def policy_evaluate(*, version_id: int, action: Action) -> Verdict:
    """The verdict of version `version_id` for `action` (the runner's single entry point)."""
    return evaluate(policy_spec_for(version_id), action)


def policy_version_active(policy_name: str = "default") -> PolicyVersion | None:
    """The latest published version of the policy, or None if it has none."""
    return (
        PolicyVersion.objects.select_related("policy")
        .filter(policy__name=policy_name, status=VersionStatus.PUBLISHED)
        .order_by("-number")
        .first()
    )


def policy_version_validate(version: PolicyVersion) -> list[ValidationMessage]:
    """Validate a version's rules against the registered tool catalog."""
    spec = policy_spec_of(version)
    tools = catalog.known_tools() if catalog.is_registered() else None
    return validate(spec.rules, tools, catalog.known_classes(), spec.sensitive_systems)


def policy_version_dry_run(
    version: PolicyVersion, *, days: int, now: datetime | None = None
) -> DryRunResult:
    """Dry-run `version` against the host's recorded actions of the last `days` days."""
    since = (now or timezone.now()) - timedelta(days=days)
    return dry_run(policy_spec_of(version), catalog.recorded_actions(since), days=days)


def policy_list() -> QuerySet[Policy]:
    versions = PolicyVersion.objects.order_by("-number", "-id")
    return Policy.objects.prefetch_related(Prefetch("versions", queryset=versions))


def policy_get(policy_id: int) -> Policy:
    return Policy.objects.get(pk=policy_id)


def policy_version_list(policy: Policy) -> list[PolicyVersion]:
    """Published versions newest first, then drafts newest first."""
    versions = list(PolicyVersion.objects.filter(policy=policy).select_related("parent"))
    published = sorted(
        (v for v in versions if v.number is not None), key=lambda v: -(v.number or 0)
    )
    drafts = sorted(
        (v for v in versions if v.number is None and v.status == VersionStatus.DRAFT),
        key=lambda v: -v.pk,
    )
    return published + drafts


def policy_version_get(version_id: int) -> PolicyVersion:
    return (
        PolicyVersion.objects.select_related("policy", "parent")
        .prefetch_related(Prefetch("rules", queryset=PolicyRule.objects.order_by("position")))
        .get(pk=version_id)
    )


def policy_change_list(policy: Policy, *, limit: int = 200) -> list[PolicyChange]:
    return list(
        PolicyChange.objects.filter(policy=policy).select_related("version").order_by("-id")[:limit]
    )
