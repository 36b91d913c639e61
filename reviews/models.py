"""Human review: inbox claims, the append-only decision log and notifications (API tokens are
`agentops.models.ApiToken`).

Gates and audit items are engine state (`agentops.models`); this app decides them through the
engine's functions and keeps the people's records around them. Decisions are append-only: on
PostgreSQL a trigger rejects UPDATE and DELETE, and their actor is kept as an id plus a label so
the record survives the user's deletion.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from reviews.states import (
    CaseStatus,
    DecisionChannel,
    DeliveryStatus,
    NoticeEvent,
    RubricItemKind,
    WebhookFormat,
)


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


class InboxChanges(models.Model):
    """How many times what the inbox shows has changed, counted by the database (migration 0019:
    triggers on gates, tasks, claims, tool calls, users and group membership add one in the
    transaction that makes the change). The inbox's version is the sum of the rows, so an
    unchanged poll reads a few rows instead of everything that waits.

    A transaction counts in its connection's own row (`backend`: the server process's pid), so
    no two transactions ever wait on one row: no worker's transition waits for another's, and
    none can deadlock on a count. The sweeper folds the rows of connections that have ended into
    the row of `backend` 0 (`reviews.services.inbox_changes_fold`), which keeps the sum. Nothing
    else in Python writes these rows."""

    FOLDED = 0  # no server process has pid 0

    backend = models.IntegerField(primary_key=True)
    changes = models.BigIntegerField()

    def __str__(self) -> str:
        return f"inbox changes of backend {self.backend}: {self.changes}"


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
    # How the decision came in: a `DecisionChannel`, or the name of a channel registered in
    # `reviews.channels` (so no fixed choices). Rows logged before this was recorded say `unknown`
    # (the column's default when it was added); new rows always name their channel
    # (`decision_record`).
    channel = models.CharField(max_length=20, default=DecisionChannel.UNKNOWN)
    # The API token that made an API decision; kept as an id when the token row goes.
    api_token = models.ForeignKey(
        "agentops.ApiToken",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # The log's chain (agentops.engine.chains): the row's place and the digest of its content
    # and the previous row's digest, set by the database on insert.
    chain_seq = models.PositiveBigIntegerField(null=True, blank=True, editable=False)
    digest = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["action", "created_at"], name="reviews_decision_action_idx")
        ]
        constraints = [
            # One row per place in the log's chain (and the index that finds its end).
            models.UniqueConstraint(
                fields=["chain_seq"],
                condition=models.Q(chain_seq__isnull=False),
                name="reviews_decision_chain_uniq",
            )
        ]
        # What people may decide. The gates and audit items are engine state in `agentops`; the
        # right to decide them is a role of the people's room, so it is declared here.
        permissions = [
            ("decide_gate", "Can approve, edit or reject gates and resolve stopped tasks"),
            ("review_audititem", "Can mark audit items ok or flag them"),
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
    slack_channel = models.CharField(
        max_length=20,
        blank=True,
        validators=[RegexValidator(r"^[CGD][A-Z0-9]{2,19}$", "a Slack channel ID, like C0123ABCD")],
        help_text="Slack channel ID (C0123ABCD) the app's bot posts to, with Approve and Reject "
        "buttons on gates; the bot must be in the channel",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(group__isnull=False) | Q(endpoint__isnull=False) | ~Q(slack_channel=""),
                name="reviews_notificationroute_has_target",
            )
        ]

    def __str__(self) -> str:
        target = self.group or self.endpoint or f"Slack {self.slack_channel}"
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


class Profile(models.Model):
    """A person's choices that are not about notifications: the language they read the product
    in (blank: their browser's, agentops.plumbing.language)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile"
    )
    language = models.CharField(max_length=10, blank=True, choices=settings.LANGUAGES)

    def __str__(self) -> str:
        return f"profile of {self.user}"


class Notice(models.Model):
    """Something people are told about, once: a gate opened (`gate:12`), a gate nears its
    timeout, a task stopped (`task:7@41`, the seq of the stop). The unique constraint makes the
    scan that finds them idempotent; each notice fans out into deliveries."""

    event = models.CharField(max_length=20, choices=NoticeEvent.choices)
    subject = models.CharField(max_length=100)
    task = models.ForeignKey("agentops.Task", on_delete=models.CASCADE, related_name="notices")
    gate = models.ForeignKey(
        "agentops.Gate", null=True, blank=True, on_delete=models.CASCADE, related_name="notices"
    )
    rule = models.CharField(max_length=200, blank=True)
    text = models.TextField()
    # The page's path: messages put AGENTOPS_PUBLIC_URL before it when they are sent.
    link = models.CharField(max_length=500)
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

    The sweeper enqueues pending deliveries whose `next_attempt_at` has come. Each attempt is an
    RQ job that claims and counts the attempt (`attempts`, `attempt_started_at`) in a committed
    UPDATE before it sends, sends with no transaction open, and then records the outcome. While an
    attempt is in flight `next_attempt_at` is when it counts as abandoned (its worker died).
    """

    notice = models.ForeignKey(Notice, on_delete=models.CASCADE, related_name="deliveries")
    # The registered channel (`reviews.channels`) that delivers it: email, webhook, slack, or
    # the name of a channel registered elsewhere (so no fixed choices).
    channel = models.CharField(max_length=20)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    # A Slack delivery's channel ID (chat.postMessage), empty for the other channels.
    slack_channel = models.CharField(max_length=20, blank=True)
    status = models.CharField(
        max_length=8, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    # Set while an attempt is in flight: claimed and counted, no outcome recorded yet.
    attempt_started_at = models.DateTimeField(null=True, blank=True)
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
            models.UniqueConstraint(
                fields=["notice", "slack_channel"],
                condition=~Q(slack_channel=""),
                name="reviews_delivery_once_per_slack_channel",
            ),
            models.CheckConstraint(
                condition=Q(user__isnull=False, endpoint__isnull=True, slack_channel="")
                | Q(user__isnull=True, endpoint__isnull=False, slack_channel="")
                | (Q(user__isnull=True, endpoint__isnull=True) & ~Q(slack_channel="")),
                name="reviews_delivery_one_recipient",
            ),
            models.CheckConstraint(
                condition=Q(status=DeliveryStatus.PENDING) | Q(attempt_started_at__isnull=True),
                name="reviews_delivery_settled_not_in_flight",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status=DeliveryStatus.PENDING),
                name="reviews_delivery_due_idx",
            )
        ]

    def __str__(self) -> str:
        recipient = self.user or self.endpoint or f"Slack {self.slack_channel}"
        return f"{self.notice} → {recipient} ({self.status})"


class SlackIdentity(models.Model):
    """A product user's Slack account (workspace and member ID), linked by the person from a
    signed link the Slack app sent to that Slack user, confirmed on their account page. A click in
    Slack acts as this user; a Slack display name never maps to anyone."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identity"
    )
    team_id = models.CharField(max_length=20)
    slack_user_id = models.CharField(max_length=20)
    linked_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team_id", "slack_user_id"], name="reviews_slackidentity_one_user"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} is Slack {self.slack_user_id} in {self.team_id}"


class SlackRequest(models.Model):
    """A Slack interaction request already accepted, by its signature: the same signed request
    seen again (a replay within the five minutes its timestamp is accepted) is refused. Rows
    older than that window are deleted as new ones come in."""

    signature = models.CharField(max_length=80, unique=True)
    received_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"Slack request {self.signature[:16]}… at {self.received_at}"


class SlackMessage(models.Model):
    """A gate's message in a Slack channel (posted by a Slack delivery), kept so the message can
    follow the gate: `shown` is the gate status it shows. When the gate is decided (from Slack,
    the product, the API or its timeout), or a click came late (`pending`), the sweep enqueues an
    update (`chat.update`); each attempt is claimed and counted before it is sent, like a
    delivery's, retried with backoff, and given up at the notification attempt cap."""

    gate = models.ForeignKey(
        "agentops.Gate", on_delete=models.CASCADE, related_name="slack_messages"
    )
    channel = models.CharField(max_length=20)
    ts = models.CharField(max_length=32)
    shown = models.CharField(max_length=16, default="open")
    # Set when the message must be rendered again although the gate's status did not change (a
    # late click: its note), cleared by the update that shows it.
    pending = models.BooleanField(default=False)
    late_slack_user = models.CharField(max_length=20, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(auto_now_add=True)
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "ts"], name="reviews_slackmessage_once")
        ]

    def __str__(self) -> str:
        return f"gate {self.gate_id} in Slack {self.channel} at {self.ts}"


class EmailActionUse(models.Model):
    """An email action link that was used (its token's sha256): a link decides once. Written in
    the transaction of the decision it made, so a refused decision leaves the link usable."""

    token_digest = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    gate_id_ref = models.BigIntegerField()
    action = models.CharField(max_length=10)
    used_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.action} link of gate {self.gate_id_ref} used by {self.user_id}"


# The most independent reviews a rubric queue may ask for per item.
MAX_REVIEWS = 5


class Rubric(models.Model):
    """What auditors answer about an audit item: typed items (`RubricItem`), defined by a policy
    admin (`reviews.services.rubric_create`). A rubric is never edited once defined: reviews
    answered it as it was; a changed rubric is a new one."""

    name = models.CharField(max_length=100, unique=True)
    instructions = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class RubricItem(models.Model):
    """One question of a rubric: pass/fail, a score on `values`' scale, or one of `values`'
    categories; `values` is the list of allowed answers, each with what it means
    (`[{"value": ..., "description": ...}]`)."""

    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveSmallIntegerField()
    key = models.SlugField(max_length=50)
    label = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=RubricItemKind.choices)
    required = models.BooleanField(default=True)
    values = models.JSONField(default=list)

    class Meta:
        ordering = ["rubric", "position"]
        constraints = [
            models.UniqueConstraint(fields=["rubric", "key"], name="reviews_rubricitem_key_uniq"),
            models.UniqueConstraint(
                fields=["rubric", "position"], name="reviews_rubricitem_position_uniq"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=RubricItemKind.values), name="reviews_rubricitem_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rubric_id}.{self.key}"


class RubricQueue(models.Model):
    """A rubric attached to the audit queue for the items of one agent, one rule, or both, with
    instructions and how many independent reviews each item needs. An item goes to the most
    specific queue that matches it (agent and rule, then agent, then rule)."""

    rubric = models.ForeignKey(Rubric, on_delete=models.PROTECT, related_name="queues")
    agent = models.CharField(max_length=100, blank=True)
    rule = models.CharField(max_length=200, blank=True)
    instructions = models.TextField(blank=True)
    reviews_required = models.PositiveSmallIntegerField(default=1)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "rule"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "rule"], name="reviews_rubricqueue_scope_uniq"
            ),
            models.CheckConstraint(
                condition=~Q(agent="", rule=""), name="reviews_rubricqueue_scope_given"
            ),
            models.CheckConstraint(
                condition=Q(reviews_required__gte=1, reviews_required__lte=MAX_REVIEWS),
                name="reviews_rubricqueue_reviews_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rubric_id} for {self.agent or 'any agent'} / {self.rule or 'any rule'}"


class AuditCase(models.Model):
    """The rubric reviews of one audit item: opened by its first review, with the queue it
    matched and the number of reviews that queue asked for then; settled when its reviewers
    agree, or by a senior reviewer when they do not."""

    audit_item = models.OneToOneField(
        "agentops.AuditItem", on_delete=models.CASCADE, related_name="rubric_case"
    )
    queue = models.ForeignKey(RubricQueue, on_delete=models.PROTECT, related_name="cases")
    # The rubric the queue had when the case opened (attaching another one later changes the
    # queue, never what a case's reviewers answer).
    rubric = models.ForeignKey(Rubric, on_delete=models.PROTECT, related_name="cases")
    reviews_required = models.PositiveSmallIntegerField()
    status = models.CharField(
        max_length=16, choices=CaseStatus.choices, default=CaseStatus.COLLECTING
    )
    created_at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=CaseStatus.values), name="reviews_auditcase_status_valid"
            ),
        ]
        indexes = [models.Index(fields=["status", "created_at"], name="reviews_auditcase_lane_idx")]

    def __str__(self) -> str:
        return f"case of audit item {self.audit_item_id} ({self.status})"


class RubricReview(models.Model):
    """One reviewer's answers to a case's rubric (`answers`: item key to value), with a verdict
    (ok or flagged), a note and a correction (what the output should have been); or a senior
    reviewer's adjudication of a disputed case. Written once, never changed."""

    case = models.ForeignKey(AuditCase, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewer_label = models.CharField(max_length=150)
    adjudication = models.BooleanField(default=False)
    answers = models.JSONField(default=dict)
    verdict = models.CharField(max_length=16)
    note = models.TextField(blank=True)
    correction = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["case", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["case", "reviewer"],
                condition=Q(adjudication=False),
                name="reviews_rubricreview_once_per_reviewer",
            ),
            models.UniqueConstraint(
                fields=["case"],
                condition=Q(adjudication=True),
                name="reviews_rubricreview_one_adjudication",
            ),
        ]

    def __str__(self) -> str:
        return f"review of case {self.case_id} by {self.reviewer_label}"


class AuditReservation(models.Model):
    """An audit item an auditor took in a batch: theirs to review until `until`; nobody else
    reviews it meanwhile. Once `until` has passed it is back in the queue (every read compares
    with the time; the next batch taken deletes the expired rows), and the holder's review of
    the item ends it."""

    audit_item = models.OneToOneField(
        "agentops.AuditItem", on_delete=models.CASCADE, related_name="reservation"
    )
    holder = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    until = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["holder", "until"], name="reviews_reservation_holder_idx")]

    def __str__(self) -> str:
        return f"audit item {self.audit_item_id} held by {self.holder_id} until {self.until}"
