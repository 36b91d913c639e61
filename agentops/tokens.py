"""API tokens: create one (shown once), find a live one, revoke one.

A token is `ao_<prefix>_<secret>`; the database keeps its sha256 and the prefix (to tell tokens
apart in lists), never the token.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from agentops.models import ApiToken

# How fresh a token's `last_used_at` is kept: a use within this of the last one writes nothing.
LAST_USED_PRECISION = timedelta(minutes=1)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """Create a token for `user`; returns the row and the token (its only appearance)."""
    name = name.strip() or "API token"
    prefix = secrets.token_hex(4)
    token = f"ao_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        row = ApiToken.objects.create(
            user=user, name=name[:100], prefix=prefix, key_hash=_digest(token)
        )
    return row, token


def api_token_live(token: str) -> ApiToken | None:
    """The live token row (with its active user) for `token`, or None; notes when it was last
    used, to the minute (the account page and `api_token` show minutes): a token in steady use
    is written once a minute, not on every request. The row's id is what the decision log
    keeps for an API decision."""
    row = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=_digest(token), revoked_at=None, user__is_active=True)
        .first()
    )
    if row is None:
        return None
    now = timezone.now()
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_PRECISION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        row.last_used_at = now
    return row


def api_token_revoke(*, token_id: int, user: User) -> bool:
    """Revoke one of `user`'s tokens; False when there is no such live token."""
    return bool(
        ApiToken.objects.filter(pk=token_id, user=user, revoked_at=None).update(
            revoked_at=timezone.now()
        )
    )
