"""Claims on inbox items: take, assign and release the task a person is working on. Each
service owns its transaction and logs its Decision in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agentops.models import Task
from reviews.models import Claim
from reviews.services._common import ReviewError, claim_check_or_take_over, decision_record
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def claim_take(
    *, task_id: int, actor: User, take_over: bool = False, via: Via = VIA_UNKNOWN
) -> Claim:
    """Take an inbox item. Someone else's item raises HeldByOther unless `take_over`, which
    moves it to `actor` and logs the takeover."""
    with transaction.atomic():
        claim, created = Claim.objects.select_for_update().get_or_create(
            task_id=task_id, defaults={"user": actor}
        )
        if not created and claim.user_id != actor.pk:
            claim_check_or_take_over(task_id=task_id, actor=actor, take_over=take_over, via=via)
            claim.refresh_from_db()
    return claim


def claim_assign(*, task_id: int, actor: User, assignee: User, via: Via = VIA_UNKNOWN) -> Claim:
    """Hand an inbox item to `assignee` (an operator); logged as a decision. Assigning the item
    to the person who holds it already changes nothing and logs nothing."""
    if not assignee.has_perm("reviews.decide_gate"):
        raise ReviewError(_("%(name)s is not an operator") % {"name": assignee.get_username()})
    with transaction.atomic():
        Task.objects.select_for_update(of=("self",)).get(pk=task_id)
        current = Claim.objects.select_for_update().filter(task_id=task_id).first()
        if current is not None and current.user_id == assignee.pk:
            return current
        before = current.user.get_username() if current is not None else ""
        claim, _created = Claim.objects.update_or_create(
            task_id=task_id,
            defaults={
                "user": assignee,
                "assigned_by": actor if assignee.pk != actor.pk else None,
                "claimed_at": timezone.now(),
            },
        )
        decision_record(
            action="reviews.claim.assigned",
            actor=actor,
            task_id=task_id,
            subject=f"task {task_id}: assigned to {assignee.get_username()}",
            detail={"from": before, "to": assignee.get_username()},
            via=via,
        )
    return claim


def claim_release(*, task_id: int, actor: User) -> None:
    """Release an inbox item: any operator may, so an item held by someone who left is not stuck
    (the release is visible: the item shows as held by nobody)."""
    Claim.objects.filter(task_id=task_id).delete()
