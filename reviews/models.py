"""Human review: approval gates, the audit queue, inbox claims and the append-only decision log.

A gate is database state: at most one open gate per step (a named partial unique constraint).
Decisions are append-only: on PostgreSQL a trigger rejects UPDATE and DELETE, and their actor is
kept as an id plus a label so the record survives the user's deletion.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from reviews.states import (
    AuditStatus,
    Channel,
    DeliveryStatus,
    GateStatus,
    NoticeEvent,
    WebhookFormat,
)


class Gate(models.Model):
    task = models.ForeignKey("agentops.Task", on_delete=models.CASCADE, related_name="gates")
    step = models.ForeignKey("agentops.Step", on_delete=models.CASCADE, related_name="gates")
    status = models.CharField(max_length=16, choices=GateStatus.choices, default=GateStatus.OPEN)
    # The proposed action in its canonical record: tool, arguments as the ledger would run them,
    # their digest, and whether a person had already edited them.
    tool = models.CharField(max_length=100)
    side_effect = models.CharField(max_length=32, blank=True)
    arguments = models.JSONField()
    args_digest = models.CharField(max_length=64)
    edited = models.BooleanField(default=False)
    amount = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    # Why: the policy version and rule that gated it.
    policy_version = models.ForeignKey(
        "policies.PolicyVersion", null=True, on_delete=models.PROTECT, related_name="+"
    )
    policy_version_number = models.PositiveIntegerField(null=True)
    rule = models.CharField(max_length=200)
    reasons = models.JSONField(default=list)
    approver_group = models.CharField(max_length=150, default="operators")
    timeout_action = models.CharField(max_length=16, default="reject")
    escalate_to = models.CharField(max_length=150, blank=True)
    due_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    feedback = models.TextField(blank=True)
    # What a person approved: the arguments the ledger runs (differ from `arguments` when edited)
    # and their digest. Empty until the gate is approved.
    approved_arguments = models.JSONField(null=True, blank=True)
    approved_digest = models.CharField(max_length=64, blank=True)
    # A rejection that also ended the task (reject and stop): "abort" or "rollback".
    stopped_with = models.CharField(max_length=16, blank=True)

    class Meta:
        ordering = ["due_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["step"],
                condition=Q(status=GateStatus.OPEN),
                name="reviews_gate_one_open_per_step",
            ),
            models.CheckConstraint(
                condition=Q(status__in=GateStatus.values), name="reviews_gate_status_valid"
            ),
        ]
        indexes = [
            # Also the inbox's open gates in their order and their count in the navigation.
            models.Index(fields=["status", "due_at"], name="reviews_gate_open_due_idx"),
        ]
        permissions = [
            ("decide_gate", "Can approve, edit or reject gates and resolve stopped tasks")
        ]

    def __str__(self) -> str:
        return f"Gate {self.pk} on task {self.task_id}: {self.tool} ({self.status})"


class AuditItem(models.Model):
    """An autonomous decision queued for after-the-fact review (audit lane, or sampled auto)."""

    task = models.ForeignKey("agentops.Task", on_delete=models.CASCADE, related_name="audit_items")
    step = models.ForeignKey("agentops.Step", on_delete=models.CASCADE, related_name="+")
    tool_call = models.OneToOneField(
        "agentops.ToolCall", on_delete=models.CASCADE, related_name="audit_item"
    )
    agent = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    route = models.CharField(max_length=16)
    sampled = models.BooleanField(default=False)
    rule = models.CharField(max_length=200)
    policy_version_number = models.PositiveIntegerField(null=True)
    status = models.CharField(
        max_length=16, choices=AuditStatus.choices, default=AuditStatus.PENDING
    )
    note = models.TextField(blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=AuditStatus.values), name="reviews_audititem_status_valid"
            ),
        ]
        indexes = [
            # The queue's two lists, each newest first (scanned backwards): the items to review
            # (this index, which also counts them for the navigation), then the reviewed ones.
            models.Index(fields=["status", "created_at"], name="reviews_audit_status_idx"),
            models.Index(
                fields=["created_at", "id"],
                condition=~Q(status=AuditStatus.PENDING),
                name="reviews_audit_reviewed_idx",
            ),
            # The filter menus: a loose index scan lists the distinct triples.
            models.Index(fields=["agent", "tool", "rule"], name="reviews_audit_choices_idx"),
        ]
        permissions = [("review_audititem", "Can mark audit items ok or flag them")]

    def __str__(self) -> str:
        return f"Audit {self.pk}: {self.tool} ({self.status})"


class Claim(models.Model):
    """Who is working on a task that waits for a person (an inbox item)."""

    task = models.OneToOneField("agentops.Task", on_delete=models.CASCADE, related_name="claim")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField(auto_now_add=True)
    # Set when someone else handed the item to `user` (assignment), empty when `user` took it.
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    def __str__(self) -> str:
        return f"task {self.task_id} held by {self.user_id}"


class Decision(models.Model):
    """One human decision, append-only (a PostgreSQL trigger rejects UPDATE and DELETE)."""

    action = models.CharField(max_length=100)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    actor_label = models.CharField(max_length=150)
    task_id_ref = models.BigIntegerField(null=True, db_index=True)
    subject = models.CharField(max_length=200)
    before_digest = models.CharField(max_length=64, blank=True)
    after_digest = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    policy_version_number = models.PositiveIntegerField(null=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["action", "created_at"], name="reviews_decision_action_idx")
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label} on {self.subject}"


class WebhookEndpoint(models.Model):
    """A receiver of signed JSON notifications (a chat bridge, an on-call tool)."""

    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(max_length=500)
    # Signs every body: X-Agentops-Signature = sha256 HMAC of "<timestamp>.<body>".
    secret = models.CharField(max_length=200)
    body_format = models.CharField(
        max_length=8, choices=WebhookFormat.choices, default=WebhookFormat.JSON
    )
    active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.name


class NotificationRoute(models.Model):
    """Who hears about what: events of a policy rule (or of any rule) go to a group by email
    and/or to a webhook. Without a matching route, the gate's approver group is emailed."""

    rule = models.CharField(max_length=200, blank=True, help_text="policy rule name; blank: any")
    event = models.CharField(
        max_length=20, choices=NoticeEvent.choices, blank=True, help_text="blank: any event"
    )
    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.CASCADE, related_name="routes"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(group__isnull=False) | Q(endpoint__isnull=False),
                name="reviews_notificationroute_has_target",
            )
        ]

    def __str__(self) -> str:
        target = self.group or self.endpoint
        return f"{self.event or 'any event'} of {self.rule or 'any rule'} → {target}"


class NotificationPreference(models.Model):
    """A person's choices: which events reach them by email, and hours to hold them back."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    events = models.JSONField(default=list, blank=True, help_text="empty: every event")
    email = models.BooleanField(default=True)
    quiet_from = models.TimeField(null=True, blank=True)
    quiet_until = models.TimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"notification preferences of {self.user}"


class Notice(models.Model):
    """Something people are told about, once: a gate opened (`gate:12`), a gate nears its
    timeout, a task stopped (`task:7@41`, the seq of the stop). The unique constraint makes the
    scan that finds them idempotent; each notice fans out into deliveries."""

    event = models.CharField(max_length=20, choices=NoticeEvent.choices)
    subject = models.CharField(max_length=100)
    task = models.ForeignKey("agentops.Task", on_delete=models.CASCADE, related_name="notices")
    gate = models.ForeignKey(
        Gate, null=True, blank=True, on_delete=models.CASCADE, related_name="notices"
    )
    rule = models.CharField(max_length=200, blank=True)
    text = models.TextField()
    link = models.URLField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["event", "subject"], name="reviews_notice_once_per_subject"
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.subject}"


class Delivery(models.Model):
    """One notice to one recipient over one channel, delivered at least once.

    The sweeper re-drives pending deliveries whose `next_attempt_at` has come; each attempt is an
    RQ job that records its outcome here.
    """

    notice = models.ForeignKey(Notice, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=8, choices=Channel.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(
        max_length=8, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["notice", "channel", "user"],
                condition=Q(user__isnull=False),
                name="reviews_delivery_once_per_user",
            ),
            models.UniqueConstraint(
                fields=["notice", "endpoint"],
                condition=Q(endpoint__isnull=False),
                name="reviews_delivery_once_per_endpoint",
            ),
            models.CheckConstraint(
                condition=Q(user__isnull=False) ^ Q(endpoint__isnull=False),
                name="reviews_delivery_one_recipient",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="reviews_delivery_due_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.notice} → {self.user or self.endpoint} ({self.status})"


class ApiToken(models.Model):
    """A personal token for the JSON API: requests made with it act as its user.

    Only the token's sha256 is stored; the token itself is shown once, when it is created.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"
