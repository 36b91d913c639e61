"""The roles people act in, and the statuses of notifications. Pure Python.

Gate and audit-item statuses are engine state: `agentops.states.GateStatus`, `AuditStatus`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class Role(models.TextChoices):
    """This app's groups, created by migration; what each may do is registered in
    `reviews.roles`. Policy admins are `policies.permissions`', task starters
    `agentops.permissions`'."""

    OPERATORS = "operators", _("Operators")
    AUDITORS = "auditors", _("Auditors")
    # Auditors who settle the audit items whose reviewers disagree (the adjudication lane).
    SENIOR_AUDITORS = "senior auditors", _("Senior auditors")


class RubricItemKind(models.TextChoices):
    """What a rubric item asks: pass or fail, a whole score on the item's stated scale, or one
    of its categories."""

    PASS_FAIL = "pass_fail", _("Pass or fail")
    SCORE = "score", _("Score")
    CATEGORY = "category", _("Category")


class CaseStatus(models.TextChoices):
    """Where the rubric reviews of one audit item stand: waiting for its reviewers, settled
    because they agreed, waiting for a senior reviewer because they did not (the adjudication
    lane), settled by one."""

    COLLECTING = "collecting", _("Waiting for reviews")
    AGREED = "agreed", _("Reviewers agreed")
    DISPUTED = "disputed", _("Reviewers disagree: adjudication")
    ADJUDICATED = "adjudicated", _("Adjudicated")


class NoticeEvent(models.TextChoices):
    """What a person is told about."""

    GATE_OPENED = "gate_opened", _("A gate opened")
    GATE_DUE_SOON = "gate_due_soon", _("A gate nears its timeout")
    # Two-person approval: the first person approved, a second (of the second group) must.
    GATE_SECOND_APPROVAL = "gate_second_approval", _("A gate waits for a second approval")
    TASK_STOPPED = "task_stopped", _("A task stopped for a human")


class DeliveryChannel(models.TextChoices):
    """The names of the built-in channels that deliver notices (`reviews.channels`); a channel
    registered elsewhere delivers under its own name."""

    EMAIL = "email", _("Email")
    WEBHOOK = "webhook", _("Webhook")
    # A message the Slack app's bot posts to a channel (chat.postMessage), with Approve and
    # Reject buttons on gate notices (`reviews.slack`).
    SLACK = "slack", "Slack"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", pgettext_lazy("delivery", "Pending")
    SENT = "sent", _("Sent")
    FAILED = "failed", _("Failed")


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON"
    SLACK = "slack", _("Slack-compatible")


class DecisionChannel(models.TextChoices):
    """How a decision reached us, for the built-in channels and the decisions no channel made
    (the decision log tells an API approval from a browser one). A channel registered elsewhere
    (`reviews.channels.channel_register`) records its own name."""

    BROWSER = "browser", _("Browser")
    API = "api", "API"
    # A button of a gate message in Slack (`reviews.slack`), by the product user linked to the
    # Slack user who clicked.
    SLACK = "slack", "Slack"
    # A signed action link of a gate email, confirmed on its page (`reviews.email_actions`).
    EMAIL = "email", _("Email link")
    # The sweeper and management commands: no person, no interface.
    SYSTEM = "system", _("System")
    # A person at the command line (`manage.py checkpoint restore --by NAME`).
    COMMAND = "command", _("Command line")
    # Decisions logged before the channel was recorded (the log is append-only: never backfilled).
    UNKNOWN = "unknown", _("Unknown")


@dataclass(frozen=True)
class Via:
    """The channel a decision came through (a `DecisionChannel`, or the name of a registered
    channel) and, for the API, the id of the token that made it.

    Interfaces say it (pages and the admin: `VIA_BROWSER`, the API: `Via.api(token_id)`, a
    registered channel: `Channel.via()`); the services pass it on to the decision log
    unchanged."""

    channel: str
    api_token_id: int | None = None

    @classmethod
    def api(cls, token_id: int) -> Via:
        return cls(DecisionChannel.API, token_id)


VIA_BROWSER = Via(DecisionChannel.BROWSER)
VIA_SLACK = Via(DecisionChannel.SLACK)
VIA_EMAIL = Via(DecisionChannel.EMAIL)
VIA_SYSTEM = Via(DecisionChannel.SYSTEM)
VIA_COMMAND = Via(DecisionChannel.COMMAND)
# A service called without saying how (a shell, a test) logs `unknown` rather than a guess.
VIA_UNKNOWN = Via(DecisionChannel.UNKNOWN)
