"""Reviews of audit items (the autonomous decisions queued for after-the-fact review), one at a
time or in bulk; each review is a Decision in the same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agentops.engine import redacted
from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.models import AuditCase
from reviews.selectors.rubrics import rubric_queue_for
from reviews.services._common import NotAllowed, ReviewError, decision_record
from reviews.services.reservations import ReservedByOther, reservation_check, reservation_end
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def audit_item_review(
    *, item_id: int, actor: User, verdict: str, note: str = "", via: Via = VIA_UNKNOWN
) -> AuditItem:
    """Mark an audit item ok or flag it (a flag needs a note). Re-reviewing is allowed and
    logged; the latest verdict stands. An item under a rubric is reviewed with it
    (`rubric_review_submit`), never with one bit: ReviewError."""
    if verdict not in (AuditStatus.OK, AuditStatus.FLAGGED):
        raise ReviewError(_("an audit verdict is ok or flagged"))
    if verdict == AuditStatus.FLAGGED and not note.strip():
        raise ReviewError(_("a flag needs a note saying what is wrong"))
    if actor is None or not actor.has_perm("reviews.review_audit"):
        raise NotAllowed(_("only auditors review audit items"))
    with transaction.atomic():
        item = AuditItem.objects.select_for_update().get(pk=item_id)
        if under_rubric(item):
            raise ReviewError(_("this item is reviewed with its rubric: answer it on its page"))
        reservation_check(item=item, actor=actor)
        reservation_end(item=item, actor=actor)
        before = item.status
        audit_item_settle(item=item, verdict=verdict, note=redacted(note.strip()), actor=actor)
        decision_record(
            action=f"reviews.audit.{'ok' if verdict == AuditStatus.OK else 'flagged'}",
            actor=actor,
            task_id=item.task_id,
            subject=f"audit item {item.pk}: {item.tool}",
            reason=redacted(note.strip()),
            policy_version_number=item.policy_version_number,
            detail={"item": item.pk, "before": before},
            via=via,
        )
        item.refresh_from_db()
    return item


def audit_item_settle(*, item: AuditItem, verdict: str, note: str, actor: User) -> None:
    """Give the audit item its verdict: the one write of an audit item's status, for a review
    with one bit (`audit_item_review`) or with a rubric (`reviews.services.rubrics`). The caller
    holds the item's lock, checks the verdict and logs the decision."""
    AuditItem.objects.filter(pk=item.pk).update(
        status=verdict, note=note, reviewed_by=actor, reviewed_at=timezone.now()
    )


def under_rubric(item: AuditItem) -> bool:
    """Whether the item is reviewed with a rubric: it has a case, or it waits for its review and
    a rubric queue takes it (a rubric attached later leaves the items already reviewed as they
    are)."""
    return AuditCase.objects.filter(audit_item=item).exists() or (
        item.status == AuditStatus.PENDING
        and rubric_queue_for(agent=item.agent, rule=item.rule) is not None
    )


def audit_items_bulk_review(
    *, item_ids: list[int], actor: User, verdict: str, note: str = "", via: Via = VIA_UNKNOWN
) -> int:
    """Mark several audit items ok (or flag them, with one note), each logged; returns how many.
    Items already carrying this verdict are left alone, so a replayed POST logs nothing twice;
    so are items under a rubric (each is answered on its own) and items someone else took in a
    batch."""
    if not item_ids:
        raise ReviewError(_("select at least one item"))
    done = 0
    for item_id in item_ids:
        item = AuditItem.objects.filter(pk=item_id).first()
        if item is None or item.status == verdict or under_rubric(item):
            continue
        try:
            audit_item_review(item_id=item_id, actor=actor, verdict=verdict, note=note, via=via)
        except ReservedByOther:
            continue
        done += 1
    return done
