"""Writes behind Slack: linking a person's Slack account to their product account, unlinking it,
the record of accepted interaction requests that refuses a replay, and the gate messages kept so
they follow their gate (each update attempt claimed before it is sent and recorded after, like a
delivery's).

Linking starts from a signed link the Slack app sent to one Slack user, but whoever holds that
link can open it, so the link alone proves nothing about who opens it: an attacker could send
their own link to an operator, and once the operator opened it the attacker's clicks in Slack
would act as the operator. So before linking, the product asks Slack who that Slack user is
(`users.info`, with no transaction open and within the Web API deadline) and links only when the
Slack account is a live person of the workspace the link names and its profile email is the
email of the product account opening the link (compared without regard to case). A mismatch, a
product account without an email, or a Slack that cannot be asked links nothing.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

import httpx
from django.core import signing
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from agentops.engine import redacted_cut
from reviews.models import SlackIdentity, SlackMessage, SlackRequest
from reviews.services._common import NotAllowed, ReviewError
from reviews.slack_web import SlackError, SlackProfile, slack_configured, slack_user_profile

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

LINK_SALT = "reviews.slack.link"
# A link to connect a Slack account works this long after the Slack app sent it.
LINK_MAX_AGE_SECONDS = 15 * 60
# Slack's window: a request whose timestamp is further than this from now is refused.
REQUEST_WINDOW_SECONDS = 5 * 60


class SlackUnconfirmed(ReviewError):
    """Slack could not be asked who the Slack user is (an outage, a timeout, a refusal of the
    app's token or scopes): nothing is linked, and the person may try again."""


def slack_link_token(*, team_id: str, slack_user_id: str) -> str:
    """A signed, expiring token naming one Slack user, sent only to that user (in Slack). Opening
    it signed in to the product links that Slack user to the account opening it, once Slack
    confirms that the Slack user is that account's person (`slack_identity_link`)."""
    signer = signing.TimestampSigner(salt=LINK_SALT)
    return signer.sign_object({"team": team_id, "user": slack_user_id})


def slack_link_read(token: str) -> tuple[str, str]:
    """(team_id, slack_user_id) of a link token; ReviewError when it is tampered with or old."""
    signer = signing.TimestampSigner(salt=LINK_SALT)
    try:
        found = signer.unsign_object(token, max_age=LINK_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise ReviewError(
            _("this link has expired: click a button in Slack again for a new one")
        ) from None
    except signing.BadSignature:
        raise ReviewError(_("this link is not valid: open the one Slack sent you")) from None
    return str(found["team"]), str(found["user"])


def _same_email(one: str, other: str) -> bool:
    return one.strip().casefold() == other.strip().casefold()


def slack_profile_refusal(profile: SlackProfile, *, team_id: str, user: User) -> str | None:
    """Why the Slack account `profile` (as Slack describes it) is not `user`'s, or None when it
    is: a live person (not deleted, not a bot) of workspace `team_id`, whose Slack profile email
    is `user`'s email, compared without regard to case."""
    if profile.team_id != team_id:
        return _("this Slack account is not of the workspace the link was made for")
    if profile.deleted or profile.is_bot:
        return _("this Slack account is deactivated or a bot")
    if not profile.email:
        return _(
            "Slack did not share this Slack account's email (the Slack app needs the "
            "users:read.email scope), so it cannot be matched to you"
        )
    if not _same_email(profile.email, user.email):
        return _(
            "this Slack account's email is not the email of your agentops account, so it is "
            "not yours: link only from your own Slack account, never from a link someone sent you"
        )
    return None


def _slack_profile(slack_user_id: str) -> SlackProfile:
    """The Slack user as Slack describes it; SlackUnconfirmed when Slack cannot say."""
    if not slack_configured():
        raise SlackUnconfirmed(_("Slack is not configured here (AGENTOPS_SLACK_BOT_TOKEN)"))
    try:
        return slack_user_profile(slack_user_id)
    except SlackError as exc:
        if exc.error in ("user_not_found", "user_not_visible"):
            raise NotAllowed(_("Slack does not know this Slack account")) from None
        logger.warning("Slack users.info for %s failed: %s", slack_user_id, exc)
        raise SlackUnconfirmed(
            _("could not confirm this Slack account with Slack (%(error)s): try again in a moment")
            % {"error": exc.error or _("no answer")}
        ) from None
    except httpx.HTTPError as exc:
        logger.warning("Slack users.info for %s failed: %r", slack_user_id, exc)
        raise SlackUnconfirmed(
            _(
                "could not confirm this Slack account with Slack (it did not answer in time): "
                "try again in a moment"
            )
        ) from None


def slack_identity_link(*, user: User, token: str) -> SlackIdentity:
    """Link the Slack user the token names to `user` (replacing `user`'s previous link), once
    Slack confirms it is `user`'s (see the module; called with no transaction open). Raises
    ReviewError (a bad or old link, a Slack account linked to someone else), NotAllowed (the Slack
    account is not `user`'s, or `user` has no email to match) or SlackUnconfirmed; each links
    nothing."""
    team_id, slack_user_id = slack_link_read(token)
    taken = SlackIdentity.objects.filter(team_id=team_id, slack_user_id=slack_user_id)
    if taken.exclude(user=user).exists():
        raise ReviewError(_("this Slack account is linked to another person; they must unlink it"))
    if not user.email.strip():
        raise NotAllowed(
            _(
                "your agentops account has no email address, so your Slack account cannot be "
                "matched to it: ask an administrator to set the email your Slack account uses"
            )
        )
    refusal = slack_profile_refusal(_slack_profile(slack_user_id), team_id=team_id, user=user)
    if refusal is not None:
        raise NotAllowed(refusal)
    try:
        with transaction.atomic():
            SlackIdentity.objects.filter(user=user).delete()
            return SlackIdentity.objects.create(
                user=user, team_id=team_id, slack_user_id=slack_user_id
            )
    except IntegrityError:
        raise ReviewError(_("this Slack account was just linked to another person")) from None


def slack_identity_unlink(*, user: User) -> bool:
    """Remove `user`'s Slack link; False when there was none."""
    deleted, _counts = SlackIdentity.objects.filter(user=user).delete()
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


# -- gate messages in Slack -----------------------------------------------------------------------


def slack_message_record(*, gate_id: int, channel: str, ts: str) -> SlackMessage:
    """Keep a posted gate message, showing the gate open, so it can follow the gate."""
    message, _created = SlackMessage.objects.get_or_create(
        channel=channel, ts=ts, defaults={"gate_id": gate_id}
    )
    return message


def slack_message_mark(*, gate_id: int, channel: str, ts: str, late_slack_user: str = "") -> int:
    """Ask for the message to be rendered again now (after a click), with the late clicker's note
    when there is one; returns the message's id. A message not kept yet is kept from here."""
    message, _created = SlackMessage.objects.update_or_create(
        channel=channel,
        ts=ts,
        defaults={"pending": True, "next_attempt_at": timezone.now()},
        create_defaults={"gate_id": gate_id, "pending": True},
    )
    if late_slack_user:
        SlackMessage.objects.filter(pk=message.pk).update(late_slack_user=late_slack_user)
    return message.pk


def slack_messages_stale(*, window: timedelta, cap: int) -> QuerySet[SlackMessage]:
    """Messages that show something else than their gate (or wait to show a late click), due,
    with no attempt in flight (or one abandoned `window` ago), and fewer than `cap` attempts."""
    now = timezone.now()
    return SlackMessage.objects.filter(
        Q(pending=True) | ~Q(shown=F("gate__status")),
        Q(attempt_started_at=None) | Q(attempt_started_at__lt=now - window),
        next_attempt_at__lte=now,
        attempts__lt=cap,
    )


def slack_message_attempt_begin(*, message_id: int, window: timedelta, cap: int) -> int | None:
    """Claim and count an attempt at updating a stale message, committed before it is sent;
    the attempt's number, or None when there is nothing to do (or another attempt is in
    flight)."""
    with transaction.atomic():
        claimed = (
            slack_messages_stale(window=window, cap=cap)
            .filter(pk=message_id)
            .update(attempts=F("attempts") + 1, attempt_started_at=timezone.now())
        )
        if not claimed:
            return None
        return SlackMessage.objects.values_list("attempts", flat=True).get(pk=message_id)


def slack_message_attempt_record(
    *, message_id: int, attempt: int, shown: str = "", error: str = "", backoff: float = 0.0
) -> bool:
    """Record attempt `attempt`: shown (`shown`, the gate status the message shows now), or
    failed with `error` and tried again after `backoff` seconds. Fenced by the attempt's number."""
    fence = SlackMessage.objects.filter(pk=message_id, attempts=attempt)
    if shown:
        updated = fence.update(
            shown=shown, pending=False, attempts=0, attempt_started_at=None, last_error=""
        )
    else:
        updated = fence.update(
            attempt_started_at=None,
            last_error=redacted_cut(error, 1000),
            next_attempt_at=timezone.now() + timedelta(seconds=backoff),
        )
    return bool(updated)
