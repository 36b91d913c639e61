"""Policies, their numbered versions and ordered rules, and the log of every change to them.

A version is a draft until it is published; from then on it and its rules are immutable (the
services refuse, and on PostgreSQL triggers reject UPDATE and DELETE). The active version of a
policy is its latest published one. Writes go through `policies.services`; constraint names follow
`policies_<model>_<rule>`.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import pgettext_lazy

from policies.engine import Route as Route
from policies.phrases import Phrase, gettext_noop


class VersionStatus(models.TextChoices):
    DRAFT = "draft", pgettext_lazy("version status", "draft")
    PUBLISHED = "published", pgettext_lazy("version status", "published")
    # A draft its author gave up on: kept (its change log points at it), never editable again.
    DISCARDED = "discarded", pgettext_lazy("version status", "discarded")


class TimeoutAction(models.TextChoices):
    REJECT = "reject", pgettext_lazy("timeout action", "reject")
    ESCALATE = "escalate", pgettext_lazy("timeout action", "escalate")


class Policy(models.Model):
    name = models.SlugField(max_length=100)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "policies"
        constraints = [
            models.UniqueConstraint(fields=["name"], name="policies_policy_name_uniq"),
        ]

    def __str__(self) -> str:
        return self.name


class PolicyVersion(models.Model):
    """A draft (no number yet) or a published, numbered, immutable version of a policy."""

    policy = models.ForeignKey(Policy, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField(null=True, blank=True, editable=False)
    status = models.CharField(
        max_length=16, choices=VersionStatus.choices, default=VersionStatus.DRAFT, editable=False
    )
    sensitive_systems = models.JSONField(default=list, blank=True)
    # No database FK: a published row is immutable, so deleting its author must not touch it.
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    author_label = models.CharField(max_length=150, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    change_note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True, editable=False)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        editable=False,
    )
    published_by_label = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        ordering = ["policy", "-number", "-id"]
        permissions = [("publish_policyversion", "Can publish and revert policy versions")]
        constraints = [
            models.UniqueConstraint(
                fields=["policy", "number"], name="policies_policyversion_policy_number_uniq"
            ),
            models.CheckConstraint(
                condition=Q(status__in=VersionStatus.values),
                name="policies_policyversion_status_valid",
            ),
            # Published and numbered go together: the active version is the highest number.
            models.CheckConstraint(
                condition=(
                    Q(
                        status__in=[VersionStatus.DRAFT, VersionStatus.DISCARDED],
                        number__isnull=True,
                        published_at__isnull=True,
                    )
                    | Q(
                        status=VersionStatus.PUBLISHED,
                        number__isnull=False,
                        published_at__isnull=False,
                    )
                ),
                name="policies_policyversion_published_numbered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.policy.name} {self.label}"

    @property
    def label(self) -> str:
        """`v3`, or a draft's `draft #12` (a `Phrase`: shown in the reader's language)."""
        if self.number is not None:
            return f"v{self.number}"
        return Phrase(gettext_noop("draft #%(id)s"), {"id": self.pk})

    @property
    def is_draft(self) -> bool:
        return self.status == VersionStatus.DRAFT


class PolicyRule(models.Model):
    """One ordered tier of a version. Empty lists and nulls are criteria that are not set."""

    version = models.ForeignKey(PolicyVersion, on_delete=models.CASCADE, related_name="rules")
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    route = models.CharField(max_length=8, choices=Route.choices)
    tools = models.JSONField(default=list, blank=True)
    side_effects = models.JSONField(default=list, blank=True)
    systems = models.JSONField(default=list, blank=True)
    touches_sensitive = models.BooleanField(default=False)
    amount_above = models.FloatField(null=True, blank=True)
    confidence_below = models.FloatField(null=True, blank=True)
    agents = models.JSONField(default=list, blank=True)
    step_at_least = models.IntegerField(null=True, blank=True)
    step_at_most = models.IntegerField(null=True, blank=True)
    edited = models.BooleanField(null=True, blank=True)
    unknown_tool = models.BooleanField(default=False)
    is_default = models.BooleanField(default=False)
    sample_rate = models.FloatField(null=True, blank=True)
    approver_group = models.CharField(max_length=150, blank=True)
    timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    timeout_action = models.CharField(
        max_length=16, choices=TimeoutAction.choices, default=TimeoutAction.REJECT
    )
    escalate_to = models.CharField(max_length=150, blank=True)
    # Two-person approval: 2 wants two different people (the second of `second_approver_group`,
    # empty: the approver group again). The database holds the default too (rows written by the
    # previous release during a deploy).
    approvals_required = models.PositiveSmallIntegerField(default=1, db_default=1)
    second_approver_group = models.CharField(max_length=150, blank=True, default="", db_default="")

    class Meta:
        ordering = ["version", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "position"], name="policies_policyrule_version_position_uniq"
            ),
            models.UniqueConstraint(
                fields=["version", "name"], name="policies_policyrule_version_name_uniq"
            ),
            models.CheckConstraint(
                condition=Q(route__in=Route.values), name="policies_policyrule_route_valid"
            ),
            models.CheckConstraint(
                condition=Q(timeout_action__in=TimeoutAction.values),
                name="policies_policyrule_timeout_action_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.position + 1}. {self.name} → {self.route}"


class PolicyChange(models.Model):
    """Append-only record of who changed what and when; PostgreSQL rejects UPDATE and DELETE."""

    policy = models.ForeignKey(Policy, on_delete=models.PROTECT, related_name="changes")
    version = models.ForeignKey(
        PolicyVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="changes"
    )
    action = models.CharField(max_length=64)
    detail = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    actor_label = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label or 'system'}"
