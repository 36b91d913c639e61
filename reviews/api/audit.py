"""The review API's endpoint of the audit queue."""

from __future__ import annotations

from datetime import datetime

from ninja import Schema

from agentops.api import ROLE, ApiRequest, page_of
from agentops.models import AuditItem
from agentops.states import AuditStatus
from policies.models import Route
from reviews.api._common import readers_only, router


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
