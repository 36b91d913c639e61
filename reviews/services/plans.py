"""Plan repair on a stopped task: the engine's `task_plan_repair` behind the operator check and
the claim check, logged as one decision with the diff in the same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils.translation import gettext as _

from agentops.engine import PlanEdit, RepairPreview, RepairRefused, task_plan_repair
from agentops.models import Task
from reviews.services._common import (
    ReviewError,
    claim_check_or_take_over,
    decision_record,
    operator_check,
)
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def plan_repair_apply(
    *,
    task_id: int,
    edit: PlanEdit,
    actor: User,
    reason: str,
    then_retry: bool = False,
    seen_digest: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> RepairPreview:
    """Apply one change to a stopped task's plan (and retry it, when asked) and log the
    decision: who, why, the diff, the plan's digests before and after, and what runs next.

    A reason is required: a changed plan must say why. Raises NotAllowed for a person who is not
    an operator, HeldByOther for a task someone else holds, TransitionRefused when the task is
    no longer stopped or its plan changed since `seen_digest`, and ReviewError for a change
    that breaks a rule of plan repair (the message names it). Nothing is written then.
    """
    operator_check(user=actor)
    reason = reason.strip()
    if not reason:
        raise ReviewError(_("say why the plan changes: the reason is recorded with the change"))

    def check(task: Task) -> None:
        claim_check_or_take_over(task_id=task.pk, actor=actor, take_over=take_over, via=via)

    with transaction.atomic():
        try:
            task, preview = task_plan_repair(
                task_id=task_id,
                edit=edit,
                actor=actor,
                reason=reason,
                then_retry=then_retry,
                seen_digest=seen_digest,
                check=check,
            )
        except RepairRefused as exc:
            raise ReviewError(exc.message) from None
        decision_record(
            action="reviews.plan.repaired",
            actor=actor,
            task_id=task_id,
            subject=f"task {task_id}: plan repaired ({edit.op})",
            before_digest=preview.before_digest,
            after_digest=preview.after_digest,
            reason=reason,
            policy_version_number=task.policy_version.number if task.policy_version else None,
            detail={
                "op": edit.op,
                "changes": preview.changes,
                "runs": [f"{r['step']} {r['title']}" for r in preview.runs],
                "then": "retry" if then_retry else "stay stopped",
                "failure": {k: (task.failure or {}).get(k) for k in ("layer", "kind")},
            },
            via=via,
        )
    return preview
