"""Gate decisions: approve, edit and approve, reject, reject and stop, bulk approval, and the
log line of a gate the sweeper timed out. A gate is locked (`select_for_update`) and checked against
the digest the person saw before it is decided, so two clicks make one decision; the engine's
`gate_transition` changes it, never this module directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction

from agentops.engine.errors import StepFailure, UnknownTool
from agentops.engine.gates import gate_transition
from agentops.engine.jsonvalues import digest, redacted, validated
from agentops.engine.registry import get_tool
from agentops.models import Gate
from agentops.services import task_abort, task_gate_approved, task_gate_rejected, task_rollback
from agentops.states import GateStatus, TaskStatus
from reviews.roles import gate_decider_refusal
from reviews.services._common import (
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    _label,
    claim_check_or_take_over,
    decision_record,
)
from reviews.states import VIA_SYSTEM, VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def gate_check_decider(*, gate: Gate, user: User) -> None:
    """Raise NotAllowed unless `user` may decide `gate` (`roles.gate_decider_refusal`)."""
    refusal = gate_decider_refusal(gate, user)
    if refusal is not None:
        raise NotAllowed(refusal)


def _locked_open_gate(gate_id: int, *, seen_digest: str | None) -> Gate:
    gate = Gate.objects.select_for_update().select_related("task", "step").get(pk=gate_id)
    if gate.status != GateStatus.OPEN:
        raise GateAlreadyDecided(f"this gate is already {gate.get_status_display().lower()}")
    if gate.task.status != TaskStatus.AWAITING_APPROVAL:
        raise GateAlreadyDecided("the task is no longer waiting at this gate")
    if seen_digest is not None and seen_digest != gate.args_digest:
        raise GateAlreadyDecided("the proposed action changed since you opened it; review again")
    return gate


def _close(gate: Gate, name: str, *, actor: User, feedback: str = "", **fields: Any) -> None:
    """Close `gate` along the engine's gate transition `name`. Caller holds the gate's row lock
    (so it is open: `_locked_open_gate`) and the transaction."""
    if not gate_transition(gate_id=gate.pk, name=name, actor=actor, feedback=feedback, **fields):
        raise GateAlreadyDecided("this gate was decided meanwhile")


def _approval(
    gate: Gate, arguments: dict[str, Any], *, edited: bool, actor: User
) -> dict[str, Any]:
    return {
        "gate": gate.pk,
        "tool": gate.tool,
        "arguments": arguments,
        "args_digest": digest(arguments),
        "policy_version_id": gate.policy_version_id,
        "rule": gate.rule,
        "edited": edited,
        "by": _label(actor),
    }


def _approve(
    gate: Gate,
    *,
    actor: User,
    arguments: dict[str, Any],
    edited: bool,
    reason: str,
    action: str,
    via: Via,
    bulk: bool = False,
) -> None:
    """Close `gate` as approved, resume its task with the approval, and log the decision.

    Caller holds the transaction and the gate's row lock, and has checked the decider.
    """
    approval = _approval(gate, arguments, edited=edited, actor=actor)
    # The gate keeps what was proposed (`arguments`) and records what was approved, so its page
    # shows both, their digests and who edited: the ledger runs `approved_arguments`.
    _close(
        gate,
        "approve",
        actor=actor,
        feedback=reason,
        approved_arguments=arguments,
        approved_digest=approval["args_digest"],
        edited=edited,
    )
    task_gate_approved(task_id=gate.task_id, step_id=gate.step_id, approval=approval, actor=actor)
    _gate_logged(
        gate,
        action=action,
        actor=actor,
        reason=reason,
        after_digest=approval["args_digest"],
        detail={
            **({"arguments": arguments, "proposed": gate.arguments} if edited else {}),
            **({"bulk": True} if bulk else {}),
        }
        or None,
        via=via,
    )


def _reject(gate: Gate, *, actor: User, feedback: str, action: str, via: Via) -> None:
    """Close `gate` as rejected, send the feedback to the agent, log the decision.

    Caller holds the transaction and the gate's row lock.
    """
    _close(gate, "reject", actor=actor, feedback=feedback)
    task_gate_rejected(task_id=gate.task_id, step_id=gate.step_id, feedback=feedback, actor=actor)
    _gate_logged(gate, action=action, actor=actor, reason=feedback, via=via)


def _gate_logged(
    gate: Gate,
    *,
    action: str,
    actor: User | None,
    reason: str,
    after_digest: str = "",
    detail: dict[str, Any] | None = None,
    via: Via,
) -> None:
    decision_record(
        action=action,
        actor=actor,
        task_id=gate.task_id,
        subject=f"gate {gate.pk}: {gate.tool}",
        before_digest=gate.args_digest,
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
) -> None:
    """Approve the gated action as proposed. The approval is bound to the arguments' digest and
    the policy version; the runner checks both again right before the call. `bulk` marks the
    decision as one of a bulk approval (reviewer-quality figures count them)."""
    with transaction.atomic():
        gate = _locked_open_gate(gate_id, seen_digest=seen_digest)
        gate_check_decider(gate=gate, user=actor)
        claim_check_or_take_over(task_id=gate.task_id, actor=actor, take_over=take_over, via=via)
        _approve(
            gate,
            actor=actor,
            arguments=gate.arguments,
            edited=gate.edited,
            reason=reason,
            action="reviews.gate.approved",
            bulk=bulk,
            via=via,
        )


def gate_edit_and_approve(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    arguments: Any,
    reason: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Approve with edited arguments. The edited action is evaluated again by the runner; a
    stricter verdict (another gate rule, or deny) opens a new gate or stops the task."""
    if not isinstance(arguments, dict):
        raise ReviewError("the edited arguments must be a JSON object")
    arguments = redacted(validated(arguments, "arguments"))
    with transaction.atomic():
        gate = _locked_open_gate(gate_id, seen_digest=seen_digest)
        gate_check_decider(gate=gate, user=actor)
        claim_check_or_take_over(task_id=gate.task_id, actor=actor, take_over=take_over, via=via)
        try:
            get_tool(gate.tool).check_arguments(arguments)
        except (StepFailure, UnknownTool) as exc:
            raise ReviewError(str(exc)) from None
        _approve(
            gate,
            actor=actor,
            arguments=arguments,
            edited=True,
            reason=reason,
            action="reviews.gate.edited",
            via=via,
        )


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
        gate = _locked_open_gate(gate_id, seen_digest=seen_digest)
        gate_check_decider(gate=gate, user=actor)
        claim_check_or_take_over(task_id=gate.task_id, actor=actor, take_over=take_over, via=via)
        _reject(
            gate,
            actor=actor,
            feedback=feedback,
            action="reviews.gate.rejected",
            via=via,
        )


STOP_OUTCOMES = {"abort": task_abort, "rollback": task_rollback}


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
    if outcome not in STOP_OUTCOMES:
        raise ReviewError("choose abort (keep the effects) or rollback (undo them)")
    reason = reason.strip()
    if not reason:
        raise ReviewError("say why the task stops")
    with transaction.atomic():
        gate = _locked_open_gate(gate_id, seen_digest=seen_digest)
        gate_check_decider(gate=gate, user=actor)
        claim_check_or_take_over(task_id=gate.task_id, actor=actor, take_over=take_over, via=via)
        _close(gate, "reject", actor=actor, feedback=reason, stopped_with=outcome)
        STOP_OUTCOMES[outcome](task_id=gate.task_id, actor=actor, reason=reason)
        _gate_logged(
            gate,
            action="reviews.gate.rejected_and_stopped",
            actor=actor,
            reason=reason,
            detail={"outcome": outcome},
            via=via,
        )


@dataclass(frozen=True)
class BulkResult:
    """What happened to one gate of a bulk approval: approved, already decided, not allowed."""

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
            gate_approve(
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
            results.append(BulkResult(gate_id, "approved"))
    return results
