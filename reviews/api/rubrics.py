"""The review API's endpoints of rubric reviews: rubrics and the queues they are attached to
(defined by policy admins), an audit item's rubric and reviews (the others' answers only once the
caller has submitted theirs), answering it, the adjudication lane and its decisions, and the
agreement of each queue's reviewers per rubric item. Every write goes through
`reviews.services.rubrics` and is one entry in the decision log, with the API as the channel.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from ninja import Schema, Status
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, TokenAuth
from agentops.models import AuditItem
from reviews.api._common import AUDIT_READERS, api_via, refusals, router
from reviews.models import Rubric, RubricQueue
from reviews.selectors.rubrics import (
    RubricState,
    adjudication_lane,
    rubric_agreement,
    rubric_list,
    rubric_state_get,
)
from reviews.services import (
    ReservedByOther,
    rubric_adjudicate,
    rubric_create,
    rubric_queue_attach,
    rubric_review_submit,
)

RUBRIC_ADMINS = TokenAuth(
    "reviews.define_rubrics", gettext_lazy("rubrics are defined by policy admins")
)
AUDITORS = TokenAuth("reviews.review_audit", gettext_lazy("rubrics are answered by auditors"))
RUBRIC_READERS = TokenAuth(
    "reviews.read_dashboard",
    gettext_lazy("rubrics and their agreement are for reviewers and policy admins"),
)
SENIOR_AUDITORS = TokenAuth(
    "reviews.adjudicate_audit", gettext_lazy("disputed items are settled by senior auditors")
)


class RubricValueOut(Schema):
    value: Any
    description: str


class RubricItemOut(Schema):
    key: str
    label: str
    kind: str
    required: bool
    values: list[RubricValueOut]


class RubricQueueOut(Schema):
    id: int
    rubric_id: int
    agent: str
    rule: str
    instructions: str
    reviews_required: int


class RubricOut(Schema):
    id: int
    name: str
    instructions: str
    items: list[RubricItemOut]
    queues: list[RubricQueueOut]
    created_at: datetime

    @staticmethod
    def resolve_items(rubric: Rubric) -> list[Any]:
        return list(rubric.items.all())

    @staticmethod
    def resolve_queues(rubric: Rubric) -> list[Any]:
        return list(rubric.queues.all())


class RubricIn(Schema):
    name: str
    instructions: str = ""
    items: list[dict[str, Any]]


class RubricQueueIn(Schema):
    agent: str = ""
    rule: str = ""
    instructions: str = ""
    reviews_required: int = 1


class ReviewIn(Schema):
    answers: dict[str, Any]
    verdict: str
    note: str = ""
    correction: str = ""


class ReviewOut(Schema):
    reviewer: str
    adjudication: bool
    answers: dict[str, Any]
    verdict: str
    note: str
    correction: str
    created_at: datetime


class ItemRubricOut(Schema):
    item_id: int
    rubric: str
    rubric_id: int
    queue_id: int
    instructions: str
    rubric_instructions: str
    items: list[RubricItemOut]
    status: str
    reviews_required: int
    reviews_given: int
    reviewed_by_you: bool
    # The reviews, once the caller may see them (they submitted theirs, or all are in); else [].
    reviews: list[ReviewOut]


def _item_rubric(item_id: int, state: RubricState) -> dict[str, Any]:
    return {
        "item_id": item_id,
        "rubric": state.rubric.name,
        "rubric_id": state.rubric.pk,
        "queue_id": state.queue.pk,
        "instructions": state.queue.instructions,
        "rubric_instructions": state.rubric.instructions,
        "items": list(state.rubric.items.order_by("position")),
        "status": state.status,
        "reviews_required": state.required,
        "reviews_given": state.given,
        "reviewed_by_you": state.mine,
        "reviews": [
            {
                "reviewer": r.reviewer_label,
                "adjudication": r.adjudication,
                "answers": r.answers,
                "verdict": r.verdict,
                "note": r.note,
                "correction": r.correction,
                "created_at": r.created_at,
            }
            for r in (state.reviews if state.visible else [])
        ],
    }


def _state_or_404(request: ApiRequest, item_id: int) -> RubricState:
    with refusals(
        missing=_("no audit item %(id)s") % {"id": item_id}, not_found=(AuditItem.DoesNotExist,)
    ):
        item = AuditItem.objects.get(pk=item_id)
    state = rubric_state_get(item=item, user=request.user)
    if state is None:
        raise HttpError(404, _("no rubric applies to audit item %(id)s") % {"id": item_id})
    return state


@router.get(
    "/rubrics",
    response={200: list[RubricOut], **ROLE},
    summary="The rubrics and the audit queues they are attached to",
    auth=RUBRIC_READERS,
)
def list_rubrics(request: ApiRequest) -> list[Rubric]:
    return rubric_list()


@router.post(
    "/rubrics",
    response={201: RubricOut, 400: Error, **ROLE},
    summary="Define a rubric: typed items, each value described",
    auth=RUBRIC_ADMINS,
)
def create_rubric(request: ApiRequest, payload: RubricIn) -> Status[Rubric]:
    with refusals():
        rubric = rubric_create(
            actor=request.user,
            name=payload.name,
            instructions=payload.instructions,
            items=payload.items,
            via=api_via(request),
        )
    return Status(201, rubric)


@router.post(
    "/rubrics/{rubric_id}/queues",
    response={200: RubricQueueOut, 400: Error, 404: Error, **ROLE},
    summary="Attach a rubric to the audit queue for an agent, a rule, or both",
    auth=RUBRIC_ADMINS,
)
def attach_rubric(request: ApiRequest, rubric_id: int, payload: RubricQueueIn) -> RubricQueue:
    with refusals(
        missing=_("no rubric %(id)s") % {"id": rubric_id}, not_found=(Rubric.DoesNotExist,)
    ):
        return rubric_queue_attach(
            actor=request.user,
            rubric_id=rubric_id,
            agent=payload.agent,
            rule=payload.rule,
            instructions=payload.instructions,
            reviews_required=payload.reviews_required,
            via=api_via(request),
        )


@router.get(
    "/audit/{item_id}/rubric",
    response={200: ItemRubricOut, 404: Error, **ROLE},
    summary="An audit item's rubric and reviews (the others' answers once you submitted yours)",
    auth=AUDIT_READERS,
)
def get_item_rubric(request: ApiRequest, item_id: int) -> dict[str, Any]:
    return _item_rubric(item_id, _state_or_404(request, item_id))


@router.post(
    "/audit/{item_id}/rubric",
    response={200: ItemRubricOut, 400: Error, 404: Error, 409: Error, **ROLE},
    summary="Answer an audit item's rubric, with a verdict (ok, or flagged with a note)",
    auth=AUDITORS,
)
def answer_item_rubric(request: ApiRequest, item_id: int, payload: ReviewIn) -> dict[str, Any]:
    with refusals(
        missing=_("no audit item %(id)s") % {"id": item_id},
        not_found=(AuditItem.DoesNotExist,),
        conflicts=(ReservedByOther,),
    ):
        rubric_review_submit(
            item_id=item_id,
            actor=request.user,
            answers=payload.answers,
            verdict=payload.verdict,
            note=payload.note,
            correction=payload.correction,
            via=api_via(request),
        )
    return _item_rubric(item_id, _state_or_404(request, item_id))


@router.get(
    "/audit/adjudication",
    response={200: list[ItemRubricOut], **ROLE},
    summary="The adjudication lane: items whose reviewers disagree, oldest first",
    auth=AUDIT_READERS,
)
def list_adjudication(request: ApiRequest, limit: int = 50, offset: int = 0) -> list[Any]:
    cases = adjudication_lane()[offset : offset + min(limit, 100)]
    answered = []
    for case in cases:
        state = rubric_state_get(item=case.audit_item, user=request.user)
        if state is not None:
            answered.append(_item_rubric(case.audit_item_id, state))
    return answered


@router.post(
    "/audit/{item_id}/adjudicate",
    response={200: ItemRubricOut, 400: Error, 404: Error, **ROLE},
    summary="Settle an item whose reviewers disagree: your answers and verdict stand",
    auth=SENIOR_AUDITORS,
)
def adjudicate_item(request: ApiRequest, item_id: int, payload: ReviewIn) -> dict[str, Any]:
    with refusals(
        missing=_("no audit item %(id)s") % {"id": item_id}, not_found=(AuditItem.DoesNotExist,)
    ):
        rubric_adjudicate(
            item_id=item_id,
            actor=request.user,
            answers=payload.answers,
            verdict=payload.verdict,
            note=payload.note,
            correction=payload.correction,
            via=api_via(request),
        )
    return _item_rubric(item_id, _state_or_404(request, item_id))


class ItemAgreementOut(Schema):
    key: str
    label: str
    kind: str
    measure: str
    value: float | None
    items: int
    answers: int


class QueueAgreementOut(Schema):
    queue_id: int
    agent: str
    rule: str
    rubric: str
    reviews_required: int
    cases: int
    disputed: int
    items: list[ItemAgreementOut]


@router.get(
    "/rubrics/agreement",
    response={200: list[QueueAgreementOut], **ROLE},
    summary="How far each queue's reviewers agree, per rubric item (Cohen's kappa, "
    "Krippendorff's alpha)",
    auth=RUBRIC_READERS,
)
def get_rubric_agreement(request: ApiRequest) -> list[dict[str, Any]]:
    return [queue.as_dict() for queue in rubric_agreement()]
