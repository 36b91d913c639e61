"""The question panel: what an agent asked a person, with the context to answer it (the goal,
where the task is, what is done so far and the agent's own context), in three queries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentops.engine import (
    Choice,
    QuestionView,
    approval_kinds_offering,
    question_of,
)
from agentops.models import Gate, Step, Task
from agentops.states import GateStatus
from reviews.models import Claim

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class QuestionPanel:
    gate: Gate
    asked: QuestionView
    steps: list[Step]
    holder: User | None

    @property
    def task(self) -> Task:
        return self.gate.task

    @property
    def is_open(self) -> bool:
        return self.gate.status == GateStatus.OPEN

    @property
    def step_number(self) -> int:
        return self.gate.step.ordinal + 1

    @property
    def answer(self) -> str:
        """The answer given (the gate's feedback holds it once answered)."""
        return self.gate.feedback


def question_get_panel(*, gate_id: int) -> QuestionPanel:
    """Raises Gate.DoesNotExist for an unknown id or a gate that is not a question."""
    gate = Gate.objects.select_related("task", "step", "decided_by").get(
        pk=gate_id, approval_kind__in=approval_kinds_offering(Choice.ANSWER)
    )
    steps = list(
        Step.objects.filter(task_id=gate.task_id)
        .only("ordinal", "title", "status", "task_id")
        .order_by("ordinal")
    )
    claim = Claim.objects.filter(task_id=gate.task_id).select_related("user").first()
    return QuestionPanel(
        gate=gate,
        asked=question_of(gate.arguments),
        steps=steps,
        holder=claim.user if claim else None,
    )
