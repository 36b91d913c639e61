"""Gate decisions: approve, edit and approve, reject, reject and stop, bulk approval, and the
log line of a gate the sweeper timed out. A decision is one engine command (`gate_decide`: the
gate locked and checked against the digest the person saw, so two clicks make one decision); this
module adds what is the people's: the role and the separation of duties, the claim, the required
reason, and the decision log, in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction

from agentops.engine import (
    Choice,
    DecisionRefused,
    GateDecided,
    GateDecision,
    GateNotOpen,
    gate_decide,
)
from agentops.models import Gate
from reviews.models import Claim
from reviews.roles import gate_decider_refusal
from reviews.services._common import (
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    claim_check_or_take_over,
    decision_record,
)
from reviews.services.approvals import approvals_detail, bulk_outcome
from reviews.states import VIA_SYSTEM, VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def gate_check_decider(*, gate: Gate, user: User) -> None:
    """Raise NotAllowed unless `user` may decide `gate` (`roles.gate_decider_refusal`)."""
    refusal = gate_decider_refusal(gate, user)
    if refusal is not None:
        raise NotAllowed(refusal)


def _decide(
    gate_id: int,
    decision: GateDecision,
    *,
    actor: User,
    seen_digest: str | None,
    take_over: bool,
    via: Via,
) -> GateDecided:
    """Have the engine decide the gate, after the decider and claim checks on the locked gate.
    Caller holds the transaction (the decision log joins it)."""

    def check(gate: Gate) -> None:
        gate_check_decider(gate=gate, user=actor)
        claim_check_or_take_over(task_id=gate.task_id, actor=actor, take_over=take_over, via=via)

    try:
        return gate_decide(
            gate_id=gate_id, decision=decision, actor=actor, seen_digest=seen_digest, check=check
        )
    except GateNotOpen as exc:
        raise GateAlreadyDecided(str(exc)) from None
    except DecisionRefused as exc:
        raise ReviewError(str(exc)) from None


def _approved_logged(
    decided: GateDecided, *, actor: User, reason: str, action: str, via: Via, bulk: bool = False
) -> None:
    gate, approval = decided.gate, decided.approval or {}
    proposed = {"arguments": approval.get("arguments"), "proposed": decided.proposed}
    _gate_logged(
        gate,
        action=action,
        actor=actor,
        reason=reason,
        before_digest=decided.proposed_digest,
        after_digest=approval.get("args_digest", ""),
        detail={
            **(proposed if action == "reviews.gate.edited" else {}),
            **({"bulk": True} if bulk else {}),
            **approvals_detail(decided),
        }
        or None,
        via=via,
    )
    if not decided.closed:
        # The first of two approvals: the approver lets go of the item, so the second person
        # can take it without a takeover.
        Claim.objects.filter(task_id=gate.task_id, user_id=actor.pk).delete()


def _gate_logged(
    gate: Gate,
    *,
    action: str,
    actor: User | None,
    reason: str,
    before_digest: str = "",
    after_digest: str = "",
    detail: dict[str, Any] | None = None,
    via: Via,
) -> None:
    decision_record(
        action=action,
        actor=actor,
        task_id=gate.task_id,
        subject=f"gate {gate.pk}: {gate.tool}",
        before_digest=before_digest or gate.args_digest,
        after_digest=after_digest,
        reason=reason,
        policy_version_number=gate.policy_version_number,
        detail={"gate": gate.pk, **(detail or {})},
        via=via,
    )


def gate_timeout_logged(gate: Gate, *, what: str, reason: str, detail: dict[str, Any]) -> None:
    """Log what the sweeper did to an overdue gate (`escalated`, `expired`) as a decision with no
    actor. A hook of `agentops.engine.gates`, called inside the sweeper's transaction."""
    _gate_logged(
        gate,
        action=f"reviews.gate.{what}",
        actor=None,
        reason=reason,
        detail=detail,
        via=VIA_SYSTEM,
    )


def gate_approve(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    reason: str = "",
    take_over: bool = False,
    bulk: bool = False,
    via: Via = VIA_UNKNOWN,
) -> GateDecided:
    """Approve the gated action as proposed. The approval is bound to the arguments' digest and
    the policy version; the runner checks both again right before the call. `bulk` marks the
    decision as one of a bulk approval (reviewer-quality figures count them)."""
    with transaction.atomic():
        decided = _decide(
            gate_id,
            GateDecision(Choice.APPROVE, reason=reason),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _approved_logged(
            decided, actor=actor, reason=reason, action="reviews.gate.approved", via=via, bulk=bulk
        )
    return decided


def gate_edit_and_approve(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    arguments: Any,
    reason: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> GateDecided:
    """Approve with edited arguments. The edited action is evaluated again by the runner; a
    stricter verdict (another gate rule, or deny) opens a new gate or stops the task."""
    with transaction.atomic():
        decided = _decide(
            gate_id,
            GateDecision(Choice.EDIT, reason=reason, arguments=arguments),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _approved_logged(decided, actor=actor, reason=reason, action="reviews.gate.edited", via=via)
    return decided


def gate_reject(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    feedback: str,
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Reject: the feedback goes to the agent in its next model call, and it re-plans the step
    (the same action rejected again and again holds the task for a person instead)."""
    feedback = feedback.strip()
    if not feedback:
        raise ReviewError("say why: the agent re-plans from your feedback")
    with transaction.atomic():
        decided = _decide(
            gate_id,
            GateDecision(Choice.REJECT, reason=feedback),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _gate_logged(
            decided.gate, action="reviews.gate.rejected", actor=actor, reason=feedback, via=via
        )


def gate_reject_and_stop(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    outcome: str,
    reason: str,
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Reject the gated action and end the task: `abort` keeps the effects made so far,
    `rollback` has a worker undo them (compensations in reverse order) and end it rolled back.
    Nothing of the gated action is sent. The gate, the task and the decision commit together."""
    reason = reason.strip()
    with transaction.atomic():
        decided = _decide(
            gate_id,
            GateDecision(Choice.STOP, reason=reason, outcome=outcome),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _gate_logged(
            decided.gate,
            action="reviews.gate.rejected_and_stopped",
            actor=actor,
            reason=reason,
            detail={"outcome": outcome},
            via=via,
        )


@dataclass(frozen=True)
class BulkResult:
    """What happened to one gate of a bulk approval: approved, approved as the first of two
    (`message` says who must approve next), already decided, not allowed."""

    gate_id: int
    outcome: str
    message: str = ""


def gates_bulk_approve(
    *,
    selection: list[tuple[int, str | None]],
    actor: User,
    reason: str = "",
    via: Via = VIA_UNKNOWN,
) -> list[BulkResult]:
    """Approve several gates that share one rule and policy version, one by one.

    `selection` pairs each gate id with the digest the person saw. A selection that mixes rules
    or versions is refused as a whole (ReviewError); otherwise each gate is decided in its own
    transaction by `gate_approve`, so one refusal does not undo the others.
    """
    if not selection:
        raise ReviewError("select at least one gate")
    ids = [gate_id for gate_id, _ in selection]
    found = {
        row["pk"]: (row["rule"], row["policy_version_id"], row["policy_version_number"])
        for row in Gate.objects.filter(pk__in=ids).values(
            "pk", "rule", "policy_version_id", "policy_version_number"
        )
    }
    tiers = {(rule, version) for rule, version, _ in found.values()}
    if len(tiers) > 1:
        names = ", ".join(sorted({f"{rule!r} (v{number})" for rule, _, number in found.values()}))
        raise ReviewError(
            "bulk approval needs gates of one rule and policy version; "
            f"this selection mixes {names}"
        )
    results = []
    for gate_id, seen_digest in selection:
        if gate_id not in found:
            results.append(BulkResult(gate_id, "not found", "no such gate"))
            continue
        try:
            decided = gate_approve(
                gate_id=gate_id,
                actor=actor,
                seen_digest=seen_digest,
                reason=reason,
                bulk=True,
                via=via,
            )
        except GateAlreadyDecided as exc:
            results.append(BulkResult(gate_id, "already decided", str(exc)))
        except NotAllowed as exc:
            results.append(BulkResult(gate_id, "not allowed", str(exc)))
        except HeldByOther as exc:
            # Bulk approval never takes an item over: that is asked for one gate at a time.
            results.append(BulkResult(gate_id, "held by someone else", str(exc)))
        else:
            results.append(BulkResult(gate_id, *bulk_outcome(decided)))
    return results
