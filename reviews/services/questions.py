"""An agent's question answered by a person: the engine records the answer and resumes the task
(`agentops.engine.question_answer`); this module checks the person first (as for a gate: the
approver group, not the task's starter, the claim) and logs `reviews.question.answered` in the
same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from agentops.engine import DecisionRefused, GateNotOpen, question_answer, question_of
from agentops.models import Gate
from reviews.services._common import (
    GateAlreadyDecided,
    ReviewError,
    claim_check_or_take_over,
    decision_record,
)
from reviews.services.gates import gate_check_decider
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def question_answer_apply(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    text: str = "",
    choice: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> Gate:
    """Answer the question `gate_id` with `text` or one of its options (`choice`) and log it.

    Raises Gate.DoesNotExist, NotAllowed, HeldByOther, GateAlreadyDecided (answered, expired or
    changed first: a second submission of the same form lands here) and ReviewError (the answer
    does not fit the question)."""

    def check(gate: Gate) -> None:
        gate_check_decider(gate=gate, user=actor)
        claim_check_or_take_over(task_id=gate.task_id, actor=actor, take_over=take_over, via=via)

    with transaction.atomic():
        try:
            decided = question_answer(
                gate_id=gate_id,
                actor=actor,
                seen_digest=seen_digest,
                text=text,
                choice=choice,
                check=check,
            )
        except GateNotOpen as exc:
            raise GateAlreadyDecided(str(exc)) from None
        except DecisionRefused as exc:
            raise ReviewError(str(exc)) from None
        gate, answer = decided.gate, (decided.approval or {})["answer"]
        asked = question_of(gate.arguments)
        decision_record(
            action="reviews.question.answered",
            actor=actor,
            task_id=gate.task_id,
            subject=f"question {gate.pk}: {asked.question}",
            before_digest=gate.args_digest,
            after_digest=gate.args_digest,
            reason=answer["answer"],
            policy_version_number=gate.policy_version_number,
            detail={
                "gate": gate.pk,
                "step": gate.step.ordinal,
                "question": asked.question[:500],
                "options": list(asked.options),
                "answer": answer["answer"],
                "chosen": answer["chosen"],
            },
            via=via,
        )
    return Gate.objects.select_related("decided_by").get(pk=gate_id)
