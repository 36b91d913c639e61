"""The review API's endpoints of agents' questions: list them and answer one (the decision
service's `gate_answer`, with the API as the channel). Which gates are questions, the approval
kinds say (`approval_kinds_offering(Choice.ANSWER)`).
"""

from __future__ import annotations

from datetime import datetime

from django.utils.translation import gettext as _
from ninja import Schema
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, page_of
from agentops.engine import Choice, approval_kinds_offering, question_of
from agentops.models import Gate
from agentops.states import GateStatus
from reviews.api._common import OPERATORS_ONLY, QUEUE_READERS, api_via, decided_gate, router
from reviews.services import gate_answer


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
    auth=QUEUE_READERS,
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
        raise HttpError(404, _("no question %(id)s") % {"id": gate_id})
    return decided_gate(
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
