"""Absolute links for messages read outside the product (email, webhooks, Slack)."""

from __future__ import annotations

from django.conf import settings


def public_link(path: str) -> str:
    """An absolute link to `path`, from AGENTOPS_PUBLIC_URL as it is when the message is sent."""
    base: str = settings.AGENTOPS["PUBLIC_URL"]
    return f"{base.rstrip('/')}{path}"
