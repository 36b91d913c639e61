"""The review API's endpoints of gates: list and read them, decide them (approve, reject, edit:
each one call of the decision service, with the API and its token as the channel, bound to the
digest the caller saw), and who was told about a gate.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils.translation import gettext as _
from ninja import Schema
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, page_of
from agentops.engine import approval_kind_of
from agentops.models import Gate
from agentops.states import GateStatus
from reviews.api._common import (
    GATE_READERS,
    OPERATORS_ONLY,
    QUEUE_READERS,
    api_via,
    decided_gate,
    router,
)
from reviews.models import Notice
from reviews.services import gate_approve, gate_edit_and_approve, gate_reject


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


@router.get(
    "/gates",
    response={200: list[GateOut], **ROLE},
    summary="Gates, open ones by default",
    auth=QUEUE_READERS,
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
    auth=GATE_READERS,
)
def get_gate(request: ApiRequest, gate_id: int) -> Gate:
    gate = Gate.objects.select_related("decided_by").filter(pk=gate_id).first()
    if gate is None:
        raise HttpError(404, _("no gate %(id)s") % {"id": gate_id})
    return gate


DECISION_RESPONSES = {200: GateOut, 400: Error, 404: Error, 409: Error, **ROLE}


@router.post(
    "/gates/{gate_id}/approve",
    response=DECISION_RESPONSES,
    summary="Approve a gate as proposed",
    auth=OPERATORS_ONLY,
)
def approve_gate(request: ApiRequest, gate_id: int, payload: ApproveIn) -> Gate:
    return decided_gate(
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
    return decided_gate(
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
    return decided_gate(
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


class NoticeOut(Schema):
    event: str
    text: str
    recipients: list[str]
    created_at: datetime

    @staticmethod
    def resolve_recipients(notice: Notice) -> list[str]:
        return sorted({d.user.get_username() for d in notice.deliveries.all() if d.user})


@router.get(
    "/gates/{gate_id}/notices",
    response={200: list[NoticeOut], 404: Error, **ROLE},
    summary="Who was told about a gate: opened, a second approval wanted, due soon",
    auth=GATE_READERS,
)
def list_gate_notices(request: ApiRequest, gate_id: int) -> list[Notice]:
    if not Gate.objects.filter(pk=gate_id).exists():
        raise HttpError(404, _("no gate %(id)s") % {"id": gate_id})
    return list(
        Notice.objects.filter(gate_id=gate_id)
        .prefetch_related("deliveries__user")
        .order_by("created_at", "id")
    )
