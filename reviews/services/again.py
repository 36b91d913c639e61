"""Start again and fork from a step: a new task from an old one, as an operator's decision.
The engine makes the move (`agentops.engine.task_restart`, `task_fork`: the old task ended as
the person chose, the new one created and linked, in one transaction); this module checks the
role and logs who did it, why, and what came of it, in the same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils.translation import gettext as _

from agentops.engine import AgentOpsError, message_of, task_fork, task_restart
from reviews.services._common import NotAllowed, ReviewError, decision_record
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from agentops.models import Task


def _operator(user: User) -> None:
    if not user.has_perm("reviews.decide_gate"):
        raise NotAllowed(_("only operators may start a task again or fork it"))


def _reason(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise ReviewError(_("say why: the decision log keeps it"))
    return reason


def task_restart_apply(
    *,
    task_id: int,
    actor: User,
    ending: str,
    reason: str,
    input: dict[str, Any] | None = None,
    goal: str | None = None,
    via: Via = VIA_UNKNOWN,
) -> Task:
    """End the task as `ending` says (abort or cancel a stopped one; keep a finished one) and
    start a new task with the same input (or `input`); logged as `reviews.task.restarted`."""
    _operator(actor)
    reason = _reason(reason)
    with transaction.atomic():
        try:
            new = task_restart(
                task_id=task_id, actor=actor, ending=ending, input=input, goal=goal, reason=reason
            )
        except (AgentOpsError, ValueError) as exc:
            raise ReviewError(message_of(exc)) from None
        decision_record(
            action="reviews.task.restarted",
            actor=actor,
            task_id=task_id,
            subject=f"task {task_id}: started again as task {new.pk}",
            reason=reason,
            detail={
                "new_task": new.pk,
                "ending": ending,
                "input_edited": input is not None,
            },
            via=via,
        )
    return new


def task_fork_apply(
    *,
    task_id: int,
    actor: User,
    from_step: int,
    reason: str,
    input: dict[str, Any] | None = None,
    via: Via = VIA_UNKNOWN,
) -> Task:
    """Fork the task from step `from_step` (0-based): a new task that references the steps
    before it and runs on from it; logged as `reviews.task.forked`."""
    _operator(actor)
    reason = _reason(reason)
    with transaction.atomic():
        try:
            new = task_fork(
                task_id=task_id, actor=actor, from_step=from_step, input=input, reason=reason
            )
        except (AgentOpsError, ValueError) as exc:
            raise ReviewError(message_of(exc)) from None
        decision_record(
            action="reviews.task.forked",
            actor=actor,
            task_id=task_id,
            subject=f"task {task_id}: forked from step {from_step + 1} as task {new.pk}",
            reason=reason,
            detail={
                "new_task": new.pk,
                "from_step": from_step + 1,
                "referenced_steps": from_step,
                "input_edited": input is not None,
            },
            via=via,
        )
    return new
