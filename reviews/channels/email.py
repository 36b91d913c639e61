"""The email channel: a notice to each person of its audience who wants it by email (their
preferences: which events, quiet hours), and, for a gate, Approve and Reject links that decide it
through the one decision service once confirmed on their page (`reviews.email_actions`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar

from django.utils import timezone
from django.utils.translation import gettext_lazy

from agentops.engine import Choice
from reviews.channels import Audience, Channel
from reviews.email_actions import notice_email
from reviews.models import Delivery, NotificationPreference
from reviews.states import DeliveryChannel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from reviews.models import Notice


class EmailChannel(Channel):
    name = DeliveryChannel.EMAIL.value
    label = gettext_lazy("Email")
    choices: ClassVar[tuple[Choice, ...]] = (Choice.APPROVE, Choice.REJECT)

    def deliveries(self, notice: Notice, audience: Audience) -> list[Delivery]:
        return [
            Delivery(
                notice=notice,
                channel=self.name,
                user=person,
                next_attempt_at=_after_quiet(person, audience.now),
            )
            for person in audience.people
            if person.email and _wants(person, notice.event)
        ]

    def deliver(self, delivery: Delivery, link: str) -> None:
        notice_email(delivery, link).send()


def _preference(user: User) -> NotificationPreference | None:
    try:
        return user.notification_preference
    except NotificationPreference.DoesNotExist:
        return None


def _wants(user: User, event: str) -> bool:
    preference = _preference(user)
    if preference is None:
        return True
    return preference.email and (not preference.events or event in preference.events)


def _after_quiet(user: User, now: datetime) -> datetime:
    """`now`, or the end of the user's quiet hours when now falls inside them (server time)."""
    preference = _preference(user)
    if preference is None or preference.quiet_from is None or preference.quiet_until is None:
        return now
    local = timezone.localtime(now)
    start, end = preference.quiet_from, preference.quiet_until
    moment = local.time()
    quiet = start <= moment < end if start < end else (moment >= start or moment < end)
    if not quiet:
        return now
    until = local.replace(hour=end.hour, minute=end.minute, second=0, microsecond=0)
    return until if until > local else until + timedelta(days=1)
