"""The review API's endpoints for the record of a task and a gate (its decisions, a gate's
notices) and for starting a task again or forking it from a step, on `reviews.api.router`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from ninja import Schema, Status
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, TaskOut, TokenAuth, page_of
from agentops.models import Gate, Task
from reviews.api_kit import DECIDE_GATE, api_via, readers_only, refusals, router
from reviews.models import Decision, Notice
from reviews.services import task_fork_apply, task_restart_apply

# -- the record of a task and a gate ------------------------------------------------------------


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


class NoticeOut(Schema):
    event: str
    text: str
    recipients: list[str]
    created_at: datetime

    @staticmethod
    def resolve_recipients(notice: Notice) -> list[str]:
        return sorted({d.user.get_username() for d in notice.deliveries.all() if d.user})


@router.get(
    "/tasks/{task_id}/decisions",
    response={200: list[DecisionOut], 404: Error, **ROLE},
    summary="The decisions people made on a task, oldest first",
    auth=TokenAuth("reviews.read_decisions", "the decision log is for reviewers and admins"),
)
def list_task_decisions(
    request: ApiRequest, task_id: int, limit: int = 50, offset: int = 0
) -> list[Decision]:
    if not Task.objects.filter(pk=task_id).exists():
        raise HttpError(404, f"no task {task_id}")
    decisions = Decision.objects.filter(task_id_ref=task_id).order_by("created_at", "id")
    return page_of(decisions, limit, offset)


@router.get(
    "/gates/{gate_id}/notices",
    response={200: list[NoticeOut], 404: Error, **ROLE},
    summary="Who was told about a gate: opened, a second approval wanted, due soon",
    auth=readers_only("gates are"),
)
def list_gate_notices(request: ApiRequest, gate_id: int) -> list[Notice]:
    if not Gate.objects.filter(pk=gate_id).exists():
        raise HttpError(404, f"no gate {gate_id}")
    return list(
        Notice.objects.filter(gate_id=gate_id)
        .prefetch_related("deliveries__user")
        .order_by("created_at", "id")
    )


# -- start again, fork from a step ---------------------------------------------------------------


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
        raise HttpError(404, f"no task {task_id}")
    with refusals():
        new = apply()
    return Status(201, Task.objects.select_related("created_by").get(pk=new.pk))


@router.post(
    "/tasks/{task_id}/restart",
    response={201: TaskOut, 400: Error, 404: Error, **ROLE},
    summary="Start a stopped or finished task again (the old one ends as chosen)",
    auth=TokenAuth(DECIDE_GATE, "starting a task again is for operators"),
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
    auth=TokenAuth(DECIDE_GATE, "forking a task is for operators"),
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
