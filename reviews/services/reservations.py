"""Reservations of the audit queue: an auditor takes a batch of items for a stated time; nobody
else reviews them meanwhile; what they leave goes back to the queue when the time is up (the
reservation simply stops counting: every check compares with the time). The holder's review of
an item ends its reservation, so an item that needs several reviews goes back for the next.

Taking a batch locks the candidate items (`SKIP LOCKED`), so two auditors taking batches at once
get different items; a one-to-one row per item is the database's guard as well.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.models import AuditReservation
from reviews.selectors.rubrics import SETTLED_OR_DISPUTED
from reviews.services._common import NotAllowed, ReviewError, decision_record
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User

BATCH_MAX = 50
MINUTES_MAX = 480


class ReservedByOther(ReviewError):
    """Someone else holds the audit item (they took it in a batch, and their time is not up)."""


def reservation_check(*, item: AuditItem, actor: User) -> None:
    """Raise ReservedByOther when someone other than `actor` holds `item` now. Caller holds the
    item's lock."""
    held = (
        AuditReservation.objects.select_related("holder")
        .filter(audit_item=item, until__gt=timezone.now())
        .exclude(holder=actor)
        .first()
    )
    if held is not None:
        until = timezone.localtime(held.until).strftime("%H:%M")
        raise ReservedByOther(
            _(
                "%(holder)s took this item in a batch until %(until)s: it comes back to the "
                "queue then, or when they review it"
            )
            % {"holder": held.holder.get_username(), "until": until}
        )


def reservation_end(*, item: AuditItem, actor: User) -> None:
    """The holder reviewed the item: their reservation of it ends. Caller holds the item's
    lock."""
    AuditReservation.objects.filter(audit_item=item, holder=actor).delete()


def audit_batch_reserve(
    *,
    actor: User,
    size: int,
    minutes: int,
    agent: str = "",
    rule: str = "",
    via: Via = VIA_UNKNOWN,
) -> list[AuditReservation]:
    """Take up to `size` items to review, oldest first (of `agent` and `rule` when given), for
    `minutes`: items waiting for review that nobody holds, that the actor has not answered, and
    that are not in the adjudication lane. Returns the new reservations (none when nothing is
    free); one decision lists them. Refused (ReviewError) while the actor holds a batch."""
    if not actor.has_perm("reviews.review_audit"):
        raise NotAllowed(_("only auditors take audit items"))
    if not 1 <= size <= BATCH_MAX:
        raise ReviewError(_("a batch is 1 to %(max)s items") % {"max": BATCH_MAX})
    if not 1 <= minutes <= MINUTES_MAX:
        raise ReviewError(_("a batch is held 1 to %(max)s minutes") % {"max": MINUTES_MAX})
    now = timezone.now()
    until = now + timedelta(minutes=minutes)
    with transaction.atomic():
        # One batch at a time, a person's requests one after the other: a second click on
        # "Take a batch" finds the first batch and takes nothing.
        get_user_model().objects.select_for_update().filter(pk=actor.pk).first()
        AuditReservation.objects.filter(until__lte=now).delete()
        held = AuditReservation.objects.filter(holder=actor, until__gt=now)
        if (count := held.count()) and (last := held.order_by("-until").first()):
            ends = timezone.localtime(last.until).strftime("%H:%M")
            raise ReviewError(
                ngettext(
                    "you hold a batch of %(count)s item until %(ends)s: review them or give "
                    "them back before taking another",
                    "you hold a batch of %(count)s items until %(ends)s: review them or give "
                    "them back before taking another",
                    count,
                )
                % {"count": count, "ends": ends}
            )
        free = (
            AuditItem.objects.filter(status=AuditStatus.PENDING)
            .exclude(reservation__until__gt=now)
            .exclude(rubric_case__reviews__reviewer=actor)
            .exclude(rubric_case__status__in=SETTLED_OR_DISPUTED)
        )
        if agent:
            free = free.filter(agent=agent)
        if rule:
            free = free.filter(rule=rule)
        items = list(
            free.order_by("created_at", "id")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("pk", flat=True)[:size]
        )
        if not items:
            return []
        made = AuditReservation.objects.bulk_create(
            AuditReservation(audit_item_id=pk, holder=actor, until=until) for pk in items
        )
        decision_record(
            action="reviews.reservation.taken",
            actor=actor,
            subject=f"{len(items)} audit item{'s' if len(items) != 1 else ''} for {minutes} min",
            detail={"items": items, "minutes": minutes, "until": until.isoformat()},
            via=via,
        )
    return made


def audit_batch_release(*, actor: User, via: Via = VIA_UNKNOWN) -> int:
    """Give back every item the actor holds now; returns how many (one decision, none when
    they held nothing)."""
    with transaction.atomic():
        held = list(
            AuditReservation.objects.filter(holder=actor, until__gt=timezone.now())
            .order_by("audit_item_id")
            .values_list("audit_item_id", flat=True)
        )
        if not held:
            return 0
        AuditReservation.objects.filter(holder=actor).delete()
        decision_record(
            action="reviews.reservation.released",
            actor=actor,
            subject=f"{len(held)} audit item{'s' if len(held) != 1 else ''} given back",
            detail={"items": held},
            via=via,
        )
    return len(held)
