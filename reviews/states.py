"""The roles people act in, and the statuses of notifications. Pure Python.

Gate and audit-item statuses are engine state: `agentops.states.GateStatus`, `AuditStatus`.
"""

from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    """Groups created by migration; what each may do is registered in `reviews.roles`."""

    OPERATORS = "operators", "Operators"
    AUDITORS = "auditors", "Auditors"
    POLICY_ADMINS = "policy admins", "Policy admins"
    TASK_STARTERS = "task starters", "Task starters"


class NoticeEvent(models.TextChoices):
    """What a person is told about."""

    GATE_OPENED = "gate_opened", "A gate opened"
    GATE_DUE_SOON = "gate_due_soon", "A gate nears its timeout"
    TASK_STOPPED = "task_stopped", "A task stopped for a human"


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON"
    SLACK = "slack", "Slack-compatible"
