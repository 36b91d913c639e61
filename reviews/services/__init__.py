"""Every write of human review: gate decisions, audit reviews, inbox claims, the decision log.
Each public service owns its transaction.

Gates and audit items are engine state: the runner opens and queues them
(`agentops.engine.gates`), and this module changes them only through the engine's functions
(`gate_transition`) and the task services. The sweeper tells the hooks registered here what a
timeout did to a gate (`gate_timeout_logged`), and runs the stopped-task SLA as a sweep hook.

Check functions (`gate_check_decider`, `operator_check`) are separate from do functions; a gate
is locked (`select_for_update`) before it is decided, so a double click or two operators at once
make one decision, and the loser gets GateAlreadyDecided. Interventions on stopped tasks and
confirmations of unknown calls wrap the agentops services, check the role, and log the Decision
in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agentops.engine.children import children_lock
from agentops.engine.errors import StepFailure, UnknownTool
from agentops.engine.gates import DEFAULT_GATE_TIMEOUT_SECONDS, gate_transition
from agentops.engine.jsonvalues import digest, redacted, validated
from agentops.engine.registry import get_tool
from agentops.models import AuditItem, Event, Gate, Step, Task, ToolCall
from agentops.selectors import task_recovery
from agentops.services import (
    TransitionRefused,
    ledger_confirm,
    task_abort,
    task_gate_approved,
    task_gate_rejected,
    task_modify,
    task_pause,
    task_resume,
    task_retry,
    task_rollback,
    task_skip_step,
)
from agentops.states import AuditStatus, GateStatus, TaskStatus
from policies.models import Policy, PolicyVersion
from policies.selectors import policy_version_active
from policies.services import policy_draft_create, policy_rule_add
from reviews.models import Claim, Decision, Delivery, NotificationPreference
from reviews.roles import gate_decider_refusal
from reviews.states import VIA_SYSTEM, VIA_UNKNOWN, DeliveryStatus, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class ReviewError(Exception):
    """A review action that cannot be taken; the message says why, for the person."""


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


# -- claims checked by every decision ----------------------------------------------------------


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
            f"{holder} is already working on this; take it over to act on it yourself",
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


# -- gates --------------------------------------------------------------------------------------


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


# -- audit items --------------------------------------------------------------------------------


def audit_item_review(
    *, item_id: int, actor: User, verdict: str, note: str = "", via: Via = VIA_UNKNOWN
) -> AuditItem:
    """Mark an audit item ok or flag it (a flag needs a note). Re-reviewing is allowed and
    logged; the latest verdict stands."""
    if verdict not in (AuditStatus.OK, AuditStatus.FLAGGED):
        raise ReviewError("an audit verdict is ok or flagged")
    if verdict == AuditStatus.FLAGGED and not note.strip():
        raise ReviewError("a flag needs a note saying what is wrong")
    if actor is None or not actor.has_perm("reviews.review_audit"):
        raise NotAllowed("only auditors review audit items")
    with transaction.atomic():
        item = AuditItem.objects.select_for_update().get(pk=item_id)
        before = item.status
        AuditItem.objects.filter(pk=item.pk).update(
            status=verdict,
            note=redacted(note.strip()),
            reviewed_by=actor,
            reviewed_at=timezone.now(),
        )
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


# -- inbox claims -------------------------------------------------------------------------------


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
        raise ReviewError(f"{assignee.get_username()} is not an operator")
    with transaction.atomic():
        Task.objects.select_for_update(of=("self",)).get(pk=task_id)
        current = Claim.objects.select_for_update().filter(task_id=task_id).first()
        if current is not None and current.user_id == assignee.pk:
            return current
        before = current.user.get_username() if current is not None else ""
        claim, _ = Claim.objects.update_or_create(
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


# -- bulk approval ------------------------------------------------------------------------------


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


# -- interventions on stopped tasks -------------------------------------------------------------

INTERVENTIONS = {
    "retry": task_retry,
    "skip": task_skip_step,
    "rollback": task_rollback,
    "abort": task_abort,
}


def operator_check(*, user: User) -> None:
    """Raise NotAllowed unless `user` is an operator (or a superuser)."""
    if not user.has_perm("reviews.decide_gate"):
        raise NotAllowed("only operators may resolve stopped tasks")


def intervention_apply(
    *,
    task_id: int,
    action: str,
    actor: User,
    reason: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Apply retry / skip / rollback / abort to a stopped task and log the decision.

    Only an option the recovery advisor offers for the task's current state is accepted. The
    intervention and its Decision commit together; a task that is no longer stopped (someone
    acted first) raises TransitionRefused and nothing is written.
    """
    if action not in INTERVENTIONS:
        raise ReviewError(f"unknown intervention {action!r}")
    operator_check(user=actor)
    reason = reason.strip()
    with transaction.atomic():
        task = (
            Task.objects.select_for_update(of=("self",))
            .select_related("policy_version")
            .get(pk=task_id)
        )
        steps = list(Step.objects.filter(task=task).order_by("ordinal"))
        calls = list(ToolCall.objects.filter(task=task).defer("args", "result").order_by("id"))
        events = list(
            Event.objects.filter(
                task=task, action__in=("agentops.step.reset", "agentops.step.failed")
            ).order_by("seq")
        )
        recovery = task_recovery(task, steps, calls, events)
        if recovery is None:
            raise TransitionRefused(f"task {task_id} is {task.status}; there is nothing to recover")
        claim_check_or_take_over(task_id=task_id, actor=actor, take_over=take_over, via=via)
        if action not in recovery.recommendation.options:
            raise ReviewError(
                f"{action} is not an option for this task now; choose one of "
                f"{', '.join(recovery.recommendation.options)}"
            )
        INTERVENTIONS[action](task_id=task_id, actor=actor, reason=reason)
        preview = recovery.previews.get(action)
        decision_record(
            action=f"reviews.intervention.{action}",
            actor=actor,
            task_id=task_id,
            subject=f"task {task_id}: {action}",
            reason=reason,
            policy_version_number=task.policy_version.number if task.policy_version else None,
            detail={
                "recommended": str(recovery.recommendation.action),
                "advisor_rule": recovery.recommendation.rule,
                "failure": {k: (task.failure or {}).get(k) for k in ("layer", "kind")},
                "breakpoint": recovery.breakpoint,
                "preview": preview.summary if preview else "",
            },
            via=via,
        )


def ledger_call_confirm(
    *,
    task_id: int,
    call_id: int,
    executed: bool,
    actor: User,
    reason: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Record a person's answer for an `executed_unknown` call of `task_id`, and log it.

    Raises ToolCall.DoesNotExist when the call is not one of this task's, and TransitionRefused
    when it is no longer unknown (someone answered first).
    """
    operator_check(user=actor)
    reason = reason.strip()
    with transaction.atomic():
        call = ToolCall.objects.select_related("task__policy_version").get(
            pk=call_id, task_id=task_id
        )
        claim_check_or_take_over(task_id=task_id, actor=actor, take_over=take_over, via=via)
        ledger_confirm(call_id=call.pk, executed=executed, actor=actor, reason=reason)
        version = call.task.policy_version
        decision_record(
            action="reviews.ledger.confirmed",
            actor=actor,
            task_id=task_id,
            subject=f"call {call.pk}: {call.tool} {'happened' if executed else 'did not happen'}",
            before_digest=call.args_digest,
            after_digest=call.args_digest,
            reason=reason,
            policy_version_number=version.number if version else None,
            detail={"call": call.pk, "key": call.idempotency_key, "executed": executed},
            via=via,
        )


# -- pause, resume, cancel, modify --------------------------------------------------------------

TASK_CONTROLS = {
    "pause": (task_pause, "reviews.task.paused"),
    "resume": (task_resume, "reviews.task.resumed"),
    "cancel": (task_abort, "reviews.task.cancelled"),
}


def task_control_apply(
    *, task_id: int, action: str, actor: User, reason: str = "", via: Via = VIA_UNKNOWN
) -> None:
    """Pause, resume or cancel a task, with its Decision in the same transaction.

    Pause parks a queued, running, retry-scheduled or gated task (a running worker stops at its
    next checkpoint; a gate is withdrawn and routed again on resume). Resume brings a paused
    task back to the queue. Cancel ends any unfinished task (effects made so far stay). A task no
    longer in a status the action applies to raises TransitionRefused: a replayed POST is
    refused, not applied twice.
    """
    if action not in TASK_CONTROLS:
        raise ReviewError(f"unknown action {action!r}")
    operator_check(user=actor)
    apply, logged = TASK_CONTROLS[action]
    reason = reason.strip()
    with transaction.atomic():
        # The engine's lock order: a task's children before the task (the services below
        # propagate pause, resume and cancel to them).
        children_lock(task_id)
        task = (
            Task.objects.select_for_update(of=("self",))
            .select_related("policy_version")
            .get(pk=task_id)
        )
        if action == "resume" and task.status != TaskStatus.PAUSED:
            raise TransitionRefused(f"task {task_id} is {task.status}, not paused")
        before = task.status
        apply(task_id=task_id, actor=actor, reason=reason)
        decision_record(
            action=logged,
            actor=actor,
            task_id=task_id,
            subject=f"task {task_id}: {action}",
            reason=reason,
            policy_version_number=task.policy_version.number if task.policy_version else None,
            detail={"before": before},
            via=via,
        )


def task_modify_apply(
    *,
    task_id: int,
    actor: User,
    budgets: dict[str, Any],
    input_changes: dict[str, Any],
    reason: str = "",
    via: Via = VIA_UNKNOWN,
) -> dict[str, Any]:
    """Change a running or paused task's budgets and editable input, and log it with the input's
    digests before and after. Returns what changed (empty: nothing logged)."""
    operator_check(user=actor)
    with transaction.atomic():
        task = Task.objects.select_for_update(of=("self",)).get(pk=task_id)
        before = digest(task.input)
        try:
            changes = task_modify(
                task_id=task_id,
                actor=actor,
                budgets=budgets,
                input_changes=input_changes,
                reason=reason.strip(),
            )
        except ValueError as exc:
            raise ReviewError(str(exc)) from None
        if changes:
            after = Task.objects.filter(pk=task_id).values_list("input", flat=True).get()
            decision_record(
                action="reviews.task.modified",
                actor=actor,
                task_id=task_id,
                subject=f"task {task_id}: modified {', '.join(sorted(changes))}",
                before_digest=before,
                after_digest=digest(after),
                reason=reason.strip(),
                detail={"changes": changes},
                via=via,
            )
    return changes


# -- bulk audit review ---------------------------------------------------------------------------


def audit_items_bulk_review(
    *, item_ids: list[int], actor: User, verdict: str, note: str = "", via: Via = VIA_UNKNOWN
) -> int:
    """Mark several audit items ok (or flag them, with one note), each logged; returns how many.
    Items already carrying this verdict are left alone, so a replayed POST logs nothing twice."""
    if not item_ids:
        raise ReviewError("select at least one item")
    done = 0
    for item_id in item_ids:
        current = AuditItem.objects.filter(pk=item_id).values_list("status", flat=True).first()
        if current is None or current == verdict:
            continue
        audit_item_review(item_id=item_id, actor=actor, verdict=verdict, note=note, via=via)
        done += 1
    return done


# -- SLA of stopped tasks ------------------------------------------------------------------------


def stopped_tasks_escalate_overdue(*, now: Any = None) -> int:
    """Apply the timeout action of stopped tasks past their SLA (AGENTOPS_STOPPED_SLA_SECONDS
    after they stopped): escalate to all operators. A claim on the task is released, and the
    escalation is logged once per stop. Returns how many tasks were escalated."""
    from reviews.selectors import stopped_sla_seconds

    sla = stopped_sla_seconds()

    now = now or timezone.now()
    cutoff = now - timedelta(seconds=sla)
    overdue = Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION, status_changed_at__lt=cutoff)
    escalated = 0
    for task_id, stopped_at in overdue.values_list("pk", "status_changed_at"):
        with transaction.atomic():
            task = (
                Task.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(pk=task_id, status=TaskStatus.NEEDS_ATTENTION, status_changed_at=stopped_at)
                .first()
            )
            already = Decision.objects.filter(
                task_id_ref=task_id, action="reviews.task.escalated", created_at__gte=stopped_at
            ).exists()
            if task is None or already:
                continue
            holder = Claim.objects.filter(task_id=task_id).select_related("user").first()
            Claim.objects.filter(task_id=task_id).delete()
            waited = int((now - stopped_at).total_seconds())
            decision_record(
                action="reviews.task.escalated",
                actor=None,
                task_id=task_id,
                subject=f"task {task_id}: stopped {waited} s without a decision",
                reason=f"no decision within {sla:g} s; escalated to all operators",
                detail={"released_from": holder.user.get_username() if holder else ""},
                via=VIA_SYSTEM,
            )
            escalated += 1
    return escalated


def stopped_tasks_sweep() -> int:
    """The sweeper's hook for the stopped-task SLA: escalate the overdue ones (no job is
    enqueued, so it returns 0)."""
    stopped_tasks_escalate_overdue()
    return 0


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


# -- calibration from audits --------------------------------------------------------------------


def _gate_settings_of(draft: PolicyVersion) -> dict[str, Any]:
    """Who decides the proposed gate and when it times out: as the draft's default rule says
    (or its first gate rule; else operators, one hour, reject)."""
    gates = draft.rules.filter(route="gate").order_by("-is_default", "position")
    model = gates.first()
    if model is None or not model.approver_group:
        return {
            "approver_group": "operators",
            "timeout_seconds": DEFAULT_GATE_TIMEOUT_SECONDS,
            "timeout_action": "reject",
        }
    return {
        "approver_group": model.approver_group,
        "timeout_seconds": model.timeout_seconds or DEFAULT_GATE_TIMEOUT_SECONDS,
        "timeout_action": model.timeout_action,
        "escalate_to": model.escalate_to,
    }


def calibration_draft_create(
    *, actor: User, rule: str, agent: str, tool: str, threshold: float, policy_id: int | None = None
) -> PolicyVersion:
    """Open a policy draft that gates `tool` for `agent` when the model's confidence is below
    `threshold`, placed just before `rule` (the rule that let the flagged items through).

    The draft is an ordinary one, built by the policies services: an admin reviews it in the
    editor, dry-runs it and publishes it, or discards it. Nothing is published here.
    """
    if actor is None or not actor.has_perm("policies.edit_policy"):
        raise NotAllowed("only policy admins may open policy drafts")
    if not (0 < threshold <= 1) or not tool or not agent:
        raise ReviewError("a proposal needs a tool, an agent and a threshold between 0 and 1")
    with transaction.atomic():
        policy = (
            Policy.objects.get(pk=policy_id) if policy_id else Policy.objects.get(name="default")
        )
        if policy_version_active(policy.name) is None:
            raise ReviewError(f"policy {policy.name} has no published version to start from")
        draft = policy_draft_create(policy=policy, author=actor)
        before = draft.rules.filter(name=rule).values_list("position", flat=True).first()
        policy_rule_add(
            draft=draft,
            author=actor,
            fields={
                "name": f"calibrated: gate {tool} for {agent} below {threshold:.2f}",
                "route": "gate",
                "tools": [tool],
                "agents": [agent],
                "confidence_below": threshold,
                **_gate_settings_of(draft),
            },
            position=before if before is not None else 0,
        )
    return draft


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
