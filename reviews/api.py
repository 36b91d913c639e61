"""The review endpoints of the JSON API (`/api/v1/`): the stopped tasks, the gates and their
decisions, the audit queue. This app's django-ninja router, mounted by the project shell
(`agentops/urls.py`) next to the others; authentication, the error answers and paging are
`agentops.api`'s.

The permissions are this app's (`reviews.roles`), checked by `TokenAuth` before the path, query
and body are read; a decision needs the digest the caller saw (409 when it is stale or someone
decided first), separation of duties holds, and each decision is one entry in the decision log,
marked as an API decision with the token that made it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from django.utils import timezone
from ninja import Schema
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, TaskOut, TokenAuth, page_of
from agentops.engine import (
    Choice,
    PlanEdit,
    RepairRefused,
    TransitionRefused,
    approval_kind_of,
    approval_kinds_offering,
    plan_repair_preview_load,
    question_of,
)
from agentops.models import AuditItem, Gate, ScopeGrant, Task
from agentops.permissions import GRANT_SCOPES
from agentops.selectors import tasks_visible_to
from agentops.states import AuditStatus, GateStatus, TaskStatus
from policies.models import Route

# The router (the project shell mounts it as `reviews.api.router`), the roles and the channel
# are shared with `reviews.api_again`, which adds its endpoints to the same router.
from reviews.api_kit import DECIDE_GATE as DECIDE_GATE
from reviews.api_kit import READ_REVIEWS as READ_REVIEWS
from reviews.api_kit import api_via, readers_only, refusals
from reviews.api_kit import router as router
from reviews.selectors import grants_visible_to, scope_grants_for_task
from reviews.services import (
    GateAlreadyDecided,
    gate_answer,
    gate_approve,
    gate_edit_and_approve,
    gate_reject,
    plan_repair_apply,
    scope_grant_apply,
    scope_grant_revoke_apply,
)

# -- schemas --------------------------------------------------------------------------------------


class ApprovalOut(Schema):
    by: str
    at: str


class GateOut(Schema):
    id: int
    task_id: int
    status: GateStatus
    tool: str
    arguments: dict[str, Any]
    args_digest: str
    amount: Decimal | None
    confidence: float | None
    rule: str
    reasons: list[Any]
    policy_version_number: int | None
    approver_group: str
    due_at: datetime
    created_at: datetime
    decided_at: datetime | None
    decided_by: str | None
    feedback: str
    # Who, and how many, must approve (four eyes: "two_approvers", 2), the approvals given so
    # far and the group whose approval the gate waits for now.
    approval_kind: str
    approvals_required: int
    approvals: list[ApprovalOut]
    waiting_for: list[str]

    @staticmethod
    def resolve_decided_by(gate: Gate) -> str | None:
        return gate.decided_by.get_username() if gate.decided_by else None

    @staticmethod
    def resolve_approvals_required(gate: Gate) -> int:
        return approval_kind_of(gate).required

    @staticmethod
    def resolve_approvals(gate: Gate) -> list[dict[str, str]]:
        return [{"by": a.by, "at": a.at} for a in approval_kind_of(gate).approvals_of(gate)]

    @staticmethod
    def resolve_waiting_for(gate: Gate) -> list[str]:
        return list(approval_kind_of(gate).waiting_for(gate))


class ApproveIn(Schema):
    seen_digest: str
    reason: str = ""


class RejectIn(Schema):
    seen_digest: str
    feedback: str


class EditIn(Schema):
    seen_digest: str
    arguments: dict[str, Any]
    reason: str = ""


class AuditItemOut(Schema):
    id: int
    task_id: int
    agent: str
    tool: str
    route: Route
    sampled: bool
    rule: str
    policy_version_number: int | None
    status: AuditStatus
    note: str
    created_at: datetime


# -- rules --------------------------------------------------------------------------------------


def _decided_gate(gate_id: int, apply: Callable[[], object]) -> Gate:
    """Run one gate decision (the caller's role was checked by `TokenAuth`); the service's
    refusals become 404, 409, 403 and 400."""
    with refusals(
        missing=f"no gate {gate_id}",
        not_found=(Gate.DoesNotExist,),
        conflicts=(GateAlreadyDecided,),
    ):
        apply()
    return Gate.objects.select_related("decided_by").get(pk=gate_id)


# -- stopped tasks ------------------------------------------------------------------------------


@router.get(
    "/tasks/stopped",
    response={200: list[TaskOut], **ROLE},
    summary="Tasks stopped for a human",
    auth=readers_only("the review queues are"),
)
def list_stopped_tasks(request: ApiRequest, limit: int = 50, offset: int = 0) -> list[Task]:
    tasks = (
        Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
        .select_related("created_by")
        .order_by("status_changed_at", "id")
    )
    return page_of(tasks, limit, offset)


# -- gates --------------------------------------------------------------------------------------


@router.get(
    "/gates",
    response={200: list[GateOut], **ROLE},
    summary="Gates, open ones by default",
    auth=readers_only("the review queues are"),
)
def list_gates(
    request: ApiRequest,
    status: GateStatus = GateStatus.OPEN,
    limit: int = 50,
    offset: int = 0,
) -> list[Gate]:
    gates = Gate.objects.filter(status=status).select_related("decided_by").order_by("due_at")
    return page_of(gates, limit, offset)


@router.get(
    "/gates/{gate_id}",
    response={200: GateOut, 404: Error, **ROLE},
    summary="One gate, with the digest a decision must send back",
    auth=readers_only("gates are"),
)
def get_gate(request: ApiRequest, gate_id: int) -> Gate:
    gate = Gate.objects.select_related("decided_by").filter(pk=gate_id).first()
    if gate is None:
        raise HttpError(404, f"no gate {gate_id}")
    return gate


DECISION_RESPONSES = {200: GateOut, 400: Error, 404: Error, 409: Error, **ROLE}
OPERATORS_ONLY = TokenAuth(DECIDE_GATE, "deciding gates is for operators")


@router.post(
    "/gates/{gate_id}/approve",
    response=DECISION_RESPONSES,
    summary="Approve a gate as proposed",
    auth=OPERATORS_ONLY,
)
def approve_gate(request: ApiRequest, gate_id: int, payload: ApproveIn) -> Gate:
    return _decided_gate(
        gate_id,
        lambda: gate_approve(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=payload.seen_digest,
            reason=payload.reason,
            via=api_via(request),
        ),
    )


@router.post(
    "/gates/{gate_id}/reject",
    response=DECISION_RESPONSES,
    summary="Reject a gate; the agent re-plans from the feedback",
    auth=OPERATORS_ONLY,
)
def reject_gate(request: ApiRequest, gate_id: int, payload: RejectIn) -> Gate:
    return _decided_gate(
        gate_id,
        lambda: gate_reject(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=payload.seen_digest,
            feedback=payload.feedback,
            via=api_via(request),
        ),
    )


@router.post(
    "/gates/{gate_id}/edit",
    response=DECISION_RESPONSES,
    summary="Approve a gate with edited arguments",
    auth=OPERATORS_ONLY,
)
def edit_gate(request: ApiRequest, gate_id: int, payload: EditIn) -> Gate:
    return _decided_gate(
        gate_id,
        lambda: gate_edit_and_approve(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=payload.seen_digest,
            arguments=payload.arguments,
            reason=payload.reason,
            via=api_via(request),
        ),
    )


# -- audit queue --------------------------------------------------------------------------------


@router.get(
    "/audit",
    response={200: list[AuditItemOut], **ROLE},
    summary="The audit queue",
    auth=readers_only("the audit queue is"),
)
def list_audit_items(
    request: ApiRequest,
    status: AuditStatus = AuditStatus.PENDING,
    limit: int = 50,
    offset: int = 0,
) -> list[AuditItem]:
    items = AuditItem.objects.filter(status=status).order_by("created_at", "id")
    return page_of(items, limit, offset)


# -- scope grants -------------------------------------------------------------------------------


class GrantOut(Schema):
    id: int
    task_id: int | None
    agent: str
    scope: str
    reason: str
    granted_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    revoked_by: str
    revoke_reason: str
    in_force: bool

    @staticmethod
    def resolve_granted_by(grant: ScopeGrant) -> str:
        return grant.granted_by_label

    @staticmethod
    def resolve_revoked_by(grant: ScopeGrant) -> str:
        return grant.revoked_by_label

    @staticmethod
    def resolve_in_force(grant: ScopeGrant) -> bool:
        return grant.revoked_at is None and grant.expires_at > timezone.now()


class GrantIn(Schema):
    scope: str
    minutes: int
    to: Literal["task", "agent"] = "task"
    reason: str


class RevokeIn(Schema):
    reason: str


GRANTERS_ONLY = TokenAuth(GRANT_SCOPES, "granting scopes is for scope granters")
GRANT_RESPONSES = {200: GrantOut, 400: Error, 404: Error, 409: Error, **ROLE}


def _granted(apply: Callable[[], ScopeGrant]) -> ScopeGrant:
    """Run a grant or revocation; the service's refusals become 404, 409, 403 and 400."""
    with refusals(
        missing="no such task or grant",
        not_found=(Task.DoesNotExist, ScopeGrant.DoesNotExist),
        conflicts=(TransitionRefused,),
    ):
        return apply()


@router.get(
    "/tasks/{task_id}/grants",
    response={200: list[GrantOut], 404: Error, **ROLE},
    summary="The scope grants of a task and of its agent, newest first",
    auth=readers_only("scope grants are"),
)
def list_grants(request: ApiRequest, task_id: int) -> list[ScopeGrant]:
    task = tasks_visible_to(request.user).filter(pk=task_id).first()
    if task is None:
        raise HttpError(404, f"no task {task_id}")
    return [line.grant for line in scope_grants_for_task(task=task)]


@router.post(
    "/tasks/{task_id}/grants",
    response=GRANT_RESPONSES,
    summary="Grant the scope a service refused, for a bounded time; the step continues",
    auth=GRANTERS_ONLY,
)
def grant_scope(request: ApiRequest, task_id: int, payload: GrantIn) -> ScopeGrant:
    if not tasks_visible_to(request.user).filter(pk=task_id).exists():
        raise HttpError(404, f"no task {task_id}")
    return _granted(
        lambda: scope_grant_apply(
            task_id=task_id,
            scope=payload.scope,
            minutes=payload.minutes,
            to_agent=payload.to == "agent",
            actor=request.user,
            reason=payload.reason,
            via=api_via(request),
        )
    )


@router.post(
    "/grants/{grant_id}/revoke",
    response=GRANT_RESPONSES,
    summary="Revoke a scope grant in force",
    auth=GRANTERS_ONLY,
)
def revoke_grant(request: ApiRequest, grant_id: int, payload: RevokeIn) -> ScopeGrant:
    if not grants_visible_to(request.user).filter(pk=grant_id).exists():
        raise HttpError(404, f"no grant {grant_id}")
    return _granted(
        lambda: scope_grant_revoke_apply(
            grant_id=grant_id, actor=request.user, reason=payload.reason, via=api_via(request)
        )
    )


# -- agents' questions --------------------------------------------------------------------------


class QuestionOut(Schema):
    id: int
    task_id: int
    status: GateStatus
    question: str
    options: list[str]
    context: str
    args_digest: str
    approver_group: str
    due_at: datetime
    created_at: datetime
    answered_at: datetime | None
    answered_by: str | None
    answer: str

    @staticmethod
    def resolve_question(gate: Gate) -> str:
        return question_of(gate.arguments).question

    @staticmethod
    def resolve_options(gate: Gate) -> list[str]:
        return list(question_of(gate.arguments).options)

    @staticmethod
    def resolve_context(gate: Gate) -> str:
        return question_of(gate.arguments).context

    @staticmethod
    def resolve_answered_at(gate: Gate) -> datetime | None:
        return gate.decided_at if gate.status == GateStatus.APPROVED else None

    @staticmethod
    def resolve_answered_by(gate: Gate) -> str | None:
        answered = gate.status == GateStatus.APPROVED and gate.decided_by
        return gate.decided_by.get_username() if answered and gate.decided_by else None

    @staticmethod
    def resolve_answer(gate: Gate) -> str:
        return gate.feedback if gate.status == GateStatus.APPROVED else ""


def _answered_kinds() -> tuple[str, ...]:
    """The approval kinds whose gates are answered (an agent's question): the kinds say so."""
    return approval_kinds_offering(Choice.ANSWER)


class AnswerIn(Schema):
    seen_digest: str
    answer: str = ""
    choice: str = ""


@router.get(
    "/questions",
    response={200: list[QuestionOut], **ROLE},
    summary="Agents' questions to people, open ones by default",
    auth=readers_only("the review queues are"),
)
def list_questions(
    request: ApiRequest, status: GateStatus = GateStatus.OPEN, limit: int = 50, offset: int = 0
) -> list[Gate]:
    questions = (
        Gate.objects.filter(approval_kind__in=_answered_kinds(), status=status)
        .select_related("decided_by")
        .order_by("due_at", "id")
    )
    return page_of(questions, limit, offset)


@router.post(
    "/questions/{gate_id}/answer",
    response={200: QuestionOut, 400: Error, 404: Error, 409: Error, **ROLE},
    summary="Answer an agent's question with text or one of its options; the task goes on",
    auth=OPERATORS_ONLY,
)
def answer_question(request: ApiRequest, gate_id: int, payload: AnswerIn) -> Gate:
    if not Gate.objects.filter(pk=gate_id, approval_kind__in=_answered_kinds()).exists():
        raise HttpError(404, f"no question {gate_id}")
    return _decided_gate(
        gate_id,
        lambda: gate_answer(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=payload.seen_digest,
            text=payload.answer,
            choice=payload.choice,
            via=api_via(request),
        ),
    )


# -- plan repair --------------------------------------------------------------------------------


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
    auth=TokenAuth(DECIDE_GATE, "repairing a plan is for operators"),
)
def repair_plan(request: ApiRequest, task_id: int, payload: PlanRepairIn) -> dict[str, Any]:
    if any(not 1 <= n <= 10_000 for n in payload.depends_on) or (
        payload.step is not None and not 1 <= payload.step <= 10_000
    ):
        raise HttpError(400, "steps are numbered from 1")
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
        missing=f"no task {task_id}",
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


# The record of a task and a gate, and starting a task again or forking it, are in
# `reviews.api_again`, on the same router: imported here so that mounting the router serves them.
from reviews import api_again  # noqa: E402, F401
