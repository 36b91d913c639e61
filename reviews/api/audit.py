"""The review API's endpoints of the audit queue: its items (with who holds each in a batch), and
taking and giving back a batch."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from django.http import StreamingHttpResponse
from django.utils.translation import gettext_lazy
from ninja import Schema

from agentops.api import ROLE, ApiRequest, Error, TokenAuth, page_of
from agentops.models import AuditItem
from agentops.states import AuditStatus
from policies.models import Route
from reviews.api._common import AUDIT_READERS, api_via, refusals, router
from reviews.forms.audit import DatasetFilterForm
from reviews.selectors.audit import reservation_in_force
from reviews.selectors.datasets import dataset_rows
from reviews.services import audit_batch_release, audit_batch_reserve
from reviews.views._common import JSONL_CONTENT_TYPE, jsonl_stream

AUDITORS_ONLY = TokenAuth(
    "reviews.review_audit", gettext_lazy("taking audit items is for auditors")
)


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
    # Who took the item in a batch, and until when, while that holds; else null.
    reserved_by: str | None
    reserved_until: datetime | None

    @staticmethod
    def resolve_reserved_by(item: AuditItem) -> str | None:
        held = reservation_in_force(item)
        return held.holder.get_username() if held else None

    @staticmethod
    def resolve_reserved_until(item: AuditItem) -> datetime | None:
        held = reservation_in_force(item)
        return held.until if held else None


@router.get(
    "/audit",
    response={200: list[AuditItemOut], **ROLE},
    summary="The audit queue",
    auth=AUDIT_READERS,
)
def list_audit_items(
    request: ApiRequest,
    status: AuditStatus = AuditStatus.PENDING,
    limit: int = 50,
    offset: int = 0,
) -> list[AuditItem]:
    items = (
        AuditItem.objects.filter(status=status)
        .select_related("reservation__holder")
        .order_by("created_at", "id")
    )
    return page_of(items, limit, offset)


class BatchIn(Schema):
    size: int
    minutes: int
    agent: str = ""
    rule: str = ""


class BatchOut(Schema):
    until: datetime | None
    items: list[int]


@router.post(
    "/audit/batch",
    response={200: BatchOut, 400: Error, **ROLE},
    summary="Take a batch of free audit items for a stated time (oldest first)",
    auth=AUDITORS_ONLY,
)
def take_audit_batch(request: ApiRequest, payload: BatchIn) -> dict[str, Any]:
    with refusals():
        taken = audit_batch_reserve(
            actor=request.user,
            size=payload.size,
            minutes=payload.minutes,
            agent=payload.agent,
            rule=payload.rule,
            via=api_via(request),
        )
    return {
        "until": taken[0].until if taken else None,
        "items": [held.audit_item_id for held in taken],
    }


class ReleasedOut(Schema):
    released: int


@router.post(
    "/audit/batch/release",
    response={200: ReleasedOut, **ROLE},
    summary="Give back every audit item you hold",
    auth=AUDITORS_ONLY,
)
def release_audit_batch(request: ApiRequest) -> dict[str, int]:
    return {"released": audit_batch_release(actor=request.user, via=api_via(request))}


@router.get(
    "/audit/dataset",
    response={200: None, **ROLE},
    summary="Reviewed audit items as an evaluation dataset (JSON Lines), streamed",
    auth=AUDIT_READERS,
    openapi_extra={
        "responses": {
            "200": {
                "description": "One JSON object a line: the step's inputs, its output, the "
                "verdict, the rubric answers that stand and any correction",
                "content": {JSONL_CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}},
            }
        }
    },
)
def export_audit_dataset(
    request: ApiRequest,
    agent: str = "",
    rule: str = "",
    date_from: date | None = None,
    date_to: date | None = None,
    verdict: Literal["ok", "flagged"] | None = None,
) -> StreamingHttpResponse:
    form = DatasetFilterForm(
        {
            "agent": agent,
            "rule": rule,
            "date_from": date_from or "",
            "date_to": date_to or "",
            "verdict": verdict or "",
        }
    )
    return jsonl_stream(dataset_rows(filters=form.filters()), name="audit-dataset")
