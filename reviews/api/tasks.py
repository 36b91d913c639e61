"""The review API's endpoints of tasks: the tasks stopped for a human, the repair of a stopped
task's plan, the decisions people made on a task, and starting a task again or forking it from a
step.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from ninja import Schema, Status
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, TaskOut, TokenAuth, page_of
from agentops.engine import PlanEdit, RepairRefused, TransitionRefused, plan_repair_preview_load
from agentops.models import Task
from agentops.states import TaskStatus
from reviews.api._common import DECIDE_GATE, QUEUE_READERS, api_via, refusals, router
from reviews.models import Decision
from reviews.services import plan_repair_apply, task_fork_apply, task_restart_apply


@router.get(
    "/tasks/stopped",
    response={200: list[TaskOut], **ROLE},
    summary="Tasks stopped for a human",
    auth=QUEUE_READERS,
)
def list_stopped_tasks(request: ApiRequest, limit: int = 50, offset: int = 0) -> list[Task]:
    tasks = (
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
        .select_related("created_by")
        .order_by("status_changed_at", "id")
    )
    return page_of(tasks, limit, offset)


class PlanRepairIn(Schema):
    """One change to a stopped task's plan; steps are numbered from 1. With `preview`, nothing
    is written: the answer's `before_digest` is what an apply sends back as `seen_digest`."""

    op: str
    step: int | None = None
    title: str = ""
    tool: str | None = None
    instruction: str = ""
    depends_on: list[int] = []
    strategy: str = ""
    reason: str = ""
    then_retry: bool = False
    seen_digest: str = ""
    preview: bool = False


class PlanRepairOut(Schema):
    applied: bool
    before_digest: str
    after_digest: str
    changes: list[dict[str, Any]]
    runs: list[dict[str, Any]]


@router.post(
    "/tasks/{task_id}/plan-repair",
    response={200: PlanRepairOut, 400: Error, 404: Error, 409: Error, **ROLE},
    summary="Preview or apply one change to a stopped task's plan",
    auth=TokenAuth(DECIDE_GATE, gettext_lazy("repairing a plan is for operators")),
)
def repair_plan(request: ApiRequest, task_id: int, payload: PlanRepairIn) -> dict[str, Any]:
    if any(not 1 <= n <= 10_000 for n in payload.depends_on) or (
        payload.step is not None and not 1 <= payload.step <= 10_000
    ):
        raise HttpError(400, _("steps are numbered from 1"))
    edit = PlanEdit(
        op=payload.op,
        ordinal=payload.step - 1 if payload.step is not None else None,
        title=payload.title,
        tool=payload.tool or None,
        instruction=payload.instruction,
        depends_on=tuple(n - 1 for n in payload.depends_on),
        strategy=payload.strategy,
    )
    with refusals(
        missing=_("no task %(id)s") % {"id": task_id},
        not_found=(Task.DoesNotExist,),
        conflicts=(TransitionRefused,),
        invalid=(RepairRefused,),
    ):
        if payload.preview:
            preview = plan_repair_preview_load(
                task_id=task_id, edit=edit, actor_label=request.user.get_username()
            )
        else:
            preview = plan_repair_apply(
                task_id=task_id,
                edit=edit,
                actor=request.user,
                reason=payload.reason,
                then_retry=payload.then_retry,
                seen_digest=payload.seen_digest,
                via=api_via(request),
            )
    return {
        "applied": not payload.preview,
        "before_digest": preview.before_digest,
        "after_digest": preview.after_digest,
        "changes": preview.changes,
        "runs": preview.runs,
    }


class DecisionOut(Schema):
    id: int
    action: str
    actor: str
    subject: str
    reason: str
    detail: dict[str, Any]
    channel: str
    created_at: datetime

    @staticmethod
    def resolve_actor(decision: Decision) -> str:
        return decision.actor_label


@router.get(
    "/tasks/{task_id}/decisions",
    response={200: list[DecisionOut], 404: Error, **ROLE},
    summary="The decisions people made on a task, oldest first",
    auth=TokenAuth(
        "reviews.read_decisions", gettext_lazy("the decision log is for reviewers and admins")
    ),
)
def list_task_decisions(
    request: ApiRequest, task_id: int, limit: int = 50, offset: int = 0
) -> list[Decision]:
    if not Task.objects.filter(pk=task_id).exists():
        raise HttpError(404, _("no task %(id)s") % {"id": task_id})
    decisions = Decision.objects.filter(task_id_ref=task_id).order_by("created_at", "id")
    return page_of(decisions, limit, offset)


class RestartIn(Schema):
    ending: Literal["abort", "cancel", "keep"]
    reason: str
    input: dict[str, Any] | None = None
    goal: str | None = None


class ForkIn(Schema):
    from_step: int  # 1-based, as the pages number steps
    reason: str
    input: dict[str, Any] | None = None


def _again(task_id: int, apply: Callable[[], Task]) -> Status[Task]:
    if not Task.objects.filter(pk=task_id).exists():
        raise HttpError(404, _("no task %(id)s") % {"id": task_id})
    with refusals():
        new = apply()
    return Status(201, Task.objects.select_related("created_by").get(pk=new.pk))


@router.post(
    "/tasks/{task_id}/restart",
    response={201: TaskOut, 400: Error, 404: Error, **ROLE},
    summary="Start a stopped or finished task again (the old one ends as chosen)",
    auth=TokenAuth(DECIDE_GATE, gettext_lazy("starting a task again is for operators")),
)
def restart_task(request: ApiRequest, task_id: int, payload: RestartIn) -> Status[Task]:
    return _again(
        task_id,
        lambda: task_restart_apply(
            task_id=task_id,
            actor=request.user,
            ending=payload.ending,
            reason=payload.reason,
            input=payload.input,
            goal=payload.goal,
            via=api_via(request),
        ),
    )


@router.post(
    "/tasks/{task_id}/fork",
    response={201: TaskOut, 400: Error, 404: Error, **ROLE},
    summary="Fork a task from a step: the steps before it are referenced, not run again",
    auth=TokenAuth(DECIDE_GATE, gettext_lazy("forking a task is for operators")),
)
def fork_task(request: ApiRequest, task_id: int, payload: ForkIn) -> Status[Task]:
    return _again(
        task_id,
        lambda: task_fork_apply(
            task_id=task_id,
            actor=request.user,
            from_step=payload.from_step - 1,
            reason=payload.reason,
            input=payload.input,
            via=api_via(request),
        ),
    )
