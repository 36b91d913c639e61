"""What every write of review shares: the review errors, the append-only decision log
(`decision_record`), the claim check that runs before a person acts on a task, and the operator
check. Nothing here owns a transaction; callers hold theirs (and the row locks they name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.translation import gettext as _

from agentops.engine import redacted
from policies.phrases import shown
from reviews.models import Claim, Decision
from reviews.states import Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class ReviewError(Exception):
    """A review action that cannot be taken; the message says why, for the person.

    The message may be a `Phrase` (a role check's or an approval kind's words, which name
    groups): `str(exc)` is then its text in the active language (the request's), `reason` the
    Phrase itself, which a page shows in the reader's language with the names kept as
    written (`translate="no"`)."""

    def __str__(self) -> str:
        return str(shown(self.args[0])) if self.args else ""

    @property
    def reason(self) -> str:
        """The message as raised, for a page (a Phrase stays one)."""
        message = self.args[0] if self.args else ""
        return message if isinstance(message, str) else str(message)


class GateAlreadyDecided(ReviewError):
    """Someone decided this gate first (or it expired): show the current state (409)."""


class NotAllowed(ReviewError):
    """The user may not take this decision (role, or separation of duties)."""


class HeldByOther(ReviewError):
    """Someone else holds the item: deciding it means taking it over, which must be asked for."""

    def __init__(self, message: str, *, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def _label(user: User | None) -> str:
    return getattr(user, "username", "") or "system"


def decision_record(
    *,
    action: str,
    actor: User | None,
    subject: str,
    task_id: int | None = None,
    before_digest: str = "",
    after_digest: str = "",
    reason: str = "",
    policy_version_number: int | None = None,
    detail: dict[str, Any] | None = None,
    via: Via,
) -> Decision:
    """Append one human decision to the log (append-only: never updated or deleted), with the
    channel it came through."""
    return Decision.objects.create(
        action=action,
        actor=actor if getattr(actor, "pk", None) else None,
        actor_label=_label(actor),
        task_id_ref=task_id,
        subject=subject[:200],
        before_digest=before_digest,
        after_digest=after_digest,
        reason=redacted(reason),
        policy_version_number=policy_version_number,
        detail=redacted(detail or {}),
        channel=via.channel,
        api_token_id=via.api_token_id,
    )


def claim_check_or_take_over(*, task_id: int, actor: User, take_over: bool, via: Via) -> None:
    """Deciding an item someone else holds takes it over, and only when asked to: raise
    HeldByOther unless `take_over`; with it, move the claim to `actor` and log the takeover.

    Caller holds the transaction."""
    claim = Claim.objects.select_for_update().select_related("user").filter(task_id=task_id).first()
    if claim is None or claim.user_id == getattr(actor, "pk", None):
        return
    holder = claim.user.get_username()
    if not take_over:
        raise HeldByOther(
            _("%(holder)s is already working on this; take it over to act on it yourself")
            % {"holder": holder},
            holder=holder,
        )
    Claim.objects.filter(pk=claim.pk).update(
        user=actor, assigned_by=None, claimed_at=timezone.now()
    )
    decision_record(
        action="reviews.claim.taken_over",
        actor=actor,
        task_id=task_id,
        subject=f"task {task_id}: taken over from {holder}",
        detail={"from": holder},
        via=via,
    )


def operator_check(*, user: User) -> None:
    """Raise NotAllowed unless `user` is an operator (or a superuser)."""
    if not user.has_perm("reviews.decide_gate"):
        raise NotAllowed(_("only operators may resolve stopped tasks"))
