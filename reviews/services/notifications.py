"""Writes behind notifications: a person's preferences, and the attempts of a delivery (begun
under a window so two senders cannot send the same delivery, then recorded).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from reviews.models import Delivery, NotificationPreference
from reviews.states import DeliveryStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def notification_preference_get(*, user: User) -> NotificationPreference:
    """The user's notification choices (unsaved defaults when they never chose)."""
    found = NotificationPreference.objects.filter(user=user).first()
    return found or NotificationPreference(user=user)


def notification_preference_save(*, form: Any, user: User) -> NotificationPreference:
    """Save a valid NotificationPreferenceForm as `user`'s choices."""
    with transaction.atomic():
        preference: NotificationPreference = form.save(commit=False)
        preference.user = user
        preference.save()
    return preference


def delivery_attempt_begin(*, delivery_id: int, window: timedelta) -> int | None:
    """Claim and count the next attempt at a due delivery, committed before anything is sent:
    `attempts` goes up by one, `attempt_started_at` is set and `next_attempt_at` moves `window`
    ahead (when the attempt counts as abandoned if no outcome was recorded by then). Returns the
    attempt's number, or None when the delivery is not pending, not due or has an attempt in
    flight (so two jobs never send the same attempt). Holds no lock once it returns."""
    now = timezone.now()
    with transaction.atomic():
        claimed = Delivery.objects.filter(
            pk=delivery_id,
            status=DeliveryStatus.PENDING,
            attempt_started_at=None,
            next_attempt_at__lte=now,
        ).update(attempts=F("attempts") + 1, attempt_started_at=now, next_attempt_at=now + window)
        if not claimed:
            return None
        return Delivery.objects.values_list("attempts", flat=True).get(pk=delivery_id)


def delivery_attempt_record(*, delivery_id: int, attempt: int, target: str, **fields: Any) -> bool:
    """Record the outcome of attempt number `attempt` (claimed by `delivery_attempt_begin`): a
    conditional UPDATE from `pending` to `target` (`pending` again for a retry, `sent`, `failed`)
    that ends the attempt in flight. The one place a delivery's status changes. Fenced by the
    attempt's number: the late outcome of an attempt already counted as abandoned changes
    nothing (False)."""
    if target not in DeliveryStatus.values:
        raise ValueError(f"unknown delivery status {target!r}")
    updated = Delivery.objects.filter(
        pk=delivery_id,
        status=DeliveryStatus.PENDING,
        attempts=attempt,
        attempt_started_at__isnull=False,
    ).update(status=target, attempt_started_at=None, **fields)
    return bool(updated)
