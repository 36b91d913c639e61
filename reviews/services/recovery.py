"""Interventions on stopped tasks (retry, skip, rollback, abort), confirmations of ledger
calls whose outcome is unknown and restores of a stopped task's rows from its log. They wrap the
engine's commands, check the operator role first and log the Decision in the same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils.translation import gettext as _

from agentops.engine import (
    INTERVENTIONS,
    CheckpointComparison,
    InterventionRefused,
    ledger_confirm,
    task_intervene,
    task_restore,
)
from agentops.models import Task, ToolCall
from reviews.services._common import (
    ReviewError,
    claim_check_or_take_over,
    decision_record,
    operator_check,
)
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


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

    The engine applies it (`task_intervene`: only an option the recovery advisor offers for the
    task's current state), after the claim check on the locked task. The intervention and its
    Decision commit together; a task that is no longer stopped (someone
    acted first) raises TransitionRefused and nothing is written.
    """
    if action not in INTERVENTIONS:
        raise ReviewError(f"unknown intervention {action!r}")
    operator_check(user=actor)
    reason = reason.strip()

    def check(task: Task) -> None:
        claim_check_or_take_over(task_id=task.pk, actor=actor, take_over=take_over, via=via)

    with transaction.atomic():
        try:
            task, recovery = task_intervene(
                task_id=task_id, action=action, actor=actor, reason=reason, check=check
            )
        except InterventionRefused as exc:
            raise ReviewError(exc.message) from None
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


def task_restore_from_log(
    *, task_id: int, actor: User, reason: str, via: Via = VIA_UNKNOWN
) -> CheckpointComparison:
    """Rebuild a stopped task's statuses and progress pointer from its latest snapshot and the
    events after it (`agentops.engine.task_restore`), and log who did it and why.

    Operators only, with a reason. The restore, its `agentops.task.restored` event and the
    Decision (`reviews.task.restored`, with the differences mended) commit together; a refusal
    (not stopped, nothing to restore, a row the log names is gone) writes nothing.
    """
    operator_check(user=actor)
    reason = reason.strip()
    if not reason:
        raise ReviewError(_("say why the rows are restored from the log (a reason is required)"))
    with transaction.atomic():
        try:
            comparison = task_restore(task_id=task_id, actor=actor, reason=reason)
        except InterventionRefused as exc:
            raise ReviewError(exc.message) from None
        decision_record(
            action="reviews.task.restored",
            actor=actor,
            task_id=task_id,
            subject=(f"task {task_id}: {len(comparison.differences)} rows restored from its log"),
            reason=reason,
            detail={
                "snapshot_seq": comparison.seq,
                "events_folded": comparison.events,
                "differences": [str(d) for d in comparison.differences],
            },
            via=via,
        )
    return comparison
