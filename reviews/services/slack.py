"""Writes behind Slack: linking a person's Slack account to their product account (from a signed
link the Slack app sent to that Slack user), unlinking it, and the record of accepted interaction
requests that refuses a replay.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone

from reviews.models import SlackIdentity, SlackRequest
from reviews.services._common import ReviewError

if TYPE_CHECKING:
    from django.contrib.auth.models import User

LINK_SALT = "reviews.slack.link"
# A link to connect a Slack account works this long after the Slack app sent it.
LINK_MAX_AGE_SECONDS = 15 * 60
# Slack's window: a request whose timestamp is further than this from now is refused.
REQUEST_WINDOW_SECONDS = 5 * 60


def slack_link_token(*, team_id: str, slack_user_id: str) -> str:
    """A signed, expiring token naming one Slack user, sent only to that user (in Slack): whoever
    opens it signed in to the product links that Slack user to their account."""
    signer = signing.TimestampSigner(salt=LINK_SALT)
    return signer.sign_object({"team": team_id, "user": slack_user_id})


def slack_link_read(token: str) -> tuple[str, str]:
    """(team_id, slack_user_id) of a link token; ReviewError when it is tampered with or old."""
    signer = signing.TimestampSigner(salt=LINK_SALT)
    try:
        found = signer.unsign_object(token, max_age=LINK_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise ReviewError(
            "this link has expired: click a button in Slack again for a new one"
        ) from None
    except signing.BadSignature:
        raise ReviewError("this link is not valid: open the one Slack sent you") from None
    return str(found["team"]), str(found["user"])


def slack_identity_link(*, user: User, token: str) -> SlackIdentity:
    """Link the Slack user the token names to `user` (replacing `user`'s previous link). Refused
    when that Slack user is linked to someone else: they unlink it first."""
    team_id, slack_user_id = slack_link_read(token)
    taken = SlackIdentity.objects.filter(team_id=team_id, slack_user_id=slack_user_id)
    if taken.exclude(user=user).exists():
        raise ReviewError("this Slack account is linked to another person; they must unlink it")
    try:
        with transaction.atomic():
            SlackIdentity.objects.filter(user=user).delete()
            return SlackIdentity.objects.create(
                user=user, team_id=team_id, slack_user_id=slack_user_id
            )
    except IntegrityError:
        raise ReviewError("this Slack account was just linked to another person") from None


def slack_identity_unlink(*, user: User) -> bool:
    """Remove `user`'s Slack link; False when there was none."""
    deleted, _ = SlackIdentity.objects.filter(user=user).delete()
    return bool(deleted)


def slack_request_record(*, signature: str) -> bool:
    """Record a verified interaction request by its signature, committed; False when it was
    recorded before (a replay). Rows older than Slack's window go at the same time: a request that
    old is refused by its timestamp anyway."""
    now = timezone.now()
    try:
        with transaction.atomic():
            SlackRequest.objects.filter(
                received_at__lt=now - timedelta(seconds=2 * REQUEST_WINDOW_SECONDS)
            ).delete()
            SlackRequest.objects.create(signature=signature)
    except IntegrityError:
        return False
    return True
