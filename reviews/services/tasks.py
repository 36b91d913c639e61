"""Operator controls on a running task (pause, resume, cancel, modify) and the stopped-task SLA
sweep that escalates tasks left stopped too long. Each control checks the role, then wraps one
engine command and logs its Decision in the same transaction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentops.engine import digest, task_control, task_modify
from agentops.models import Task
from agentops.states import TaskStatus
from reviews.models import Claim, Decision
from reviews.services._common import ReviewError, decision_record, operator_check
from reviews.states import VIA_SYSTEM, VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The decision each control of the engine (`agentops.engine.CONTROLS`) is logged as.
TASK_CONTROLS = {
    "pause": "reviews.task.paused",
    "resume": "reviews.task.resumed",
    "cancel": "reviews.task.cancelled",
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
    reason = reason.strip()
    with transaction.atomic():
        # The engine locks the task (its children first) and returns it as it was before.
        task = task_control(task_id=task_id, action=action, actor=actor, reason=reason)
        before = task.status
        decision_record(
            action=TASK_CONTROLS[action],
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
