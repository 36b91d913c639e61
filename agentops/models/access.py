"""Who may act beyond the record's own rules: personal API tokens and the scopes people grant
a stopped task's agent for a bounded time."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class ApiToken(models.Model):
    """A personal token for the JSON API: requests made with it act as its user.

    Only the token's sha256 is stored; the token itself is shown once, when it is created. Every
    app's API router authenticates with it (`agentops.api.TokenAuth`); moved here from `reviews`
    (`0017_api_token_from_reviews` renamed its table).
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


class ScopeGrant(models.Model):
    """A person's grant of one OAuth scope the agent's credential lacks, for a bounded time: to
    one task (`task`), or to every task of the agent (`task` empty). Tool calls carry it while
    it is in force (`expires_at` in the future, not revoked). Written by `engine.grants` only;
    the people's decision log records who granted and who revoked it, and why."""

    task = models.ForeignKey(
        "agentops.Task",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="scope_grants",
    )
    agent = models.CharField(max_length=100)
    scope = models.CharField(max_length=100)
    reason = models.TextField()
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    granted_by_label = models.CharField(max_length=150)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    revoked_by_label = models.CharField(max_length=150, blank=True)
    revoke_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("created_at")),
                name="agentops_scopegrant_bounded",
            ),
            models.CheckConstraint(
                condition=~Q(reason=""), name="agentops_scopegrant_reason_given"
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "expires_at"], name="agentops_scopegrant_agent_idx"),
        ]

    def __str__(self) -> str:
        where = f"task {self.task_id}" if self.task_id else f"agent {self.agent}"
        return f"{self.scope} for {where} until {self.expires_at:%Y-%m-%d %H:%M}"


class ProviderIdentity(models.Model):
    """The person an OpenID Provider knows as `subject` (the ID token's `sub`) at `issuer`: the
    user they sign in as (`agentops.oidc`). People are matched by this pair, never by email or
    username, which the provider may reassign; the first sign-in creates the user and this row."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="agentops_provideridentity_one_per_subject"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} ({self.user})"
