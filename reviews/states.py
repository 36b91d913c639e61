"""Statuses of gates and audit items, and the roles people act in. Pure Python."""

from __future__ import annotations

from django.db import models


class GateStatus(models.TextChoices):
    OPEN = "open", "Open"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"


class AuditStatus(models.TextChoices):
    PENDING = "pending", "To review"
    OK = "ok", "OK"
    FLAGGED = "flagged", "Flagged"


class Role(models.TextChoices):
    """Groups created by migration; permissions attach to them."""

    OPERATORS = "operators", "Operators"
    AUDITORS = "auditors", "Auditors"
    POLICY_ADMINS = "policy admins", "Policy admins"
