"""An agent asks a person: the built-in tool `ask_human`, the question lane it parks in, and the
answer that comes back as the tool's result.

An agent that declares `ask_human` among its tools may call it with a question, the options it
offers (optional) and the context a person needs. The call is always routed to a person
(`routing.question_verdict`: the policy's gate settings when it gates the call, else the defaults;
a policy that denies it refuses it): the step parks at a gate of approval kind `question`
(`Question`), the task waits in `awaiting_approval` and the job ends, so no worker waits for the
answer. A person answers with text or one of the offered options (`question_answer`, under the
gate's row lock, bound to the digest of the question they saw); the answer is stored with the
step's approval, the gate closes as approved and the task resumes. The runner then runs the tool
through the ledger like any other (a `pending` row with its key, then `succeeded`): its result
is the answer, which the model reads as the tool's result on its next call; a crash after the
answer never asks again. An unanswered question follows the gate timeout rules (escalate to the
rule's group, or expire: the agent is told nobody answered and re-plans the step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from django.db import transaction
from pydantic import Field

from agentops.engine.approvals import (
    Approval,
    ApprovalKind,
    Choice,
    approval_kind_of,
    approval_kind_register,
)
from agentops.engine.decisions import (
    DecisionRefused,
    GateDecided,
    gate_close,
    locked_open_gate,
    step_approval,
    task_gate_approved,
)
from agentops.engine.errors import FailureKind, OrchestrationFailure
from agentops.engine.jsonvalues import redacted
from agentops.engine.registry import ToolContext, tool
from agentops.engine.routing import ASK_HUMAN as ASK_HUMAN
from agentops.engine.routing import QUESTION as QUESTION
from agentops.models import Gate
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

QUESTION_MAX = 2000
OPTION_MAX = 200
OPTIONS_MAX = 10
ANSWER_MAX = 4000


@tool(side_effect="read", name=ASK_HUMAN)
def ask_human(
    call: ToolContext,
    *,
    question: Annotated[str, Field(min_length=1, max_length=QUESTION_MAX)],
    options: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=OPTION_MAX)]] | None,
        Field(max_length=OPTIONS_MAX),
    ] = None,
    context: Annotated[str, Field(max_length=QUESTION_MAX)] = "",
) -> dict[str, Any]:
    """Ask a person a question and wait for the answer (free text, or one of `options`)."""
    if call.answer is None:
        raise OrchestrationFailure(
            "ask_human ran without a person's answer", kind=FailureKind.OUTPUT_INVALID
        )
    return dict(call.answer)


class Question(ApprovalKind):
    """A question an agent put to a person: one member of the approver group answers it
    (`question_answer`). Approving it without an answer would give the agent nothing, so the
    kind refuses an approval; a rejection (the person declines, with a reason the agent reads)
    and the timeout rules work as for any gate."""

    name: ClassVar[str] = QUESTION
    label: ClassVar[str] = "a person's answer"
    # Answered, or declined (rejected, or rejected and stopped); never approved.
    choices: ClassVar[frozenset[Choice]] = frozenset({Choice.ANSWER, Choice.REJECT, Choice.STOP})

    def may_decide(
        self, gate: Gate, *, user: User | AnonymousUser, groups: frozenset[str]
    ) -> str | None:
        if gate.approver_group in groups:
            return None
        return Phrase(
            gettext_noop("only members of %(group)s may answer this question"),
            {"group": repr(gate.approver_group)},
        )

    def is_satisfied(self, gate: Gate, approvals: Sequence[Approval]) -> bool:
        return False

    def approval_record(self, gate: Gate, approval: Approval) -> None:
        raise DecisionRefused(self.choice_refusal(Choice.APPROVE))

    def choice_refusal(self, choice: Choice) -> str:
        return Phrase(
            gettext_noop(
                "this is the agent's question: answer it (its page, or %(endpoint)s); "
                "approving it would give the agent no answer"
            ),
            {"endpoint": "POST /questions/{id}/answer"},
        )

    def timeout_feedback(self, gate: Gate, waited: int) -> str:
        return (
            f"Nobody answered your question within {waited} s. Go on without the answer if "
            "that is safe, ask differently, or stop."
        )


approval_kind_register(Question())


@dataclass(frozen=True)
class QuestionView:
    """What the agent asked, read from a question gate's arguments (which are the model's)."""

    question: str
    options: tuple[str, ...]
    context: str


def question_of(arguments: Any) -> QuestionView:
    """The question, options and context of an `ask_human` call's arguments, as text."""
    data = arguments if isinstance(arguments, Mapping) else {}
    options = data.get("options") or []
    return QuestionView(
        question=str(data.get("question") or ""),
        options=tuple(str(o) for o in options) if isinstance(options, list) else (),
        context=str(data.get("context") or ""),
    )


def answer_record(
    view: QuestionView, *, text: str = "", choice: str = "", by: str
) -> dict[str, Any]:
    """The tool's result for a person's answer: one of the offered options, or their own text.
    Raises DecisionRefused for neither, both, an option the agent did not offer, or an answer
    too long."""
    text = text.strip()
    if bool(text) == bool(choice):
        raise DecisionRefused(
            Phrase(
                gettext_noop("answer with your own words or choose one of the options, not both")
            )
        )
    if choice and choice not in view.options:
        raise DecisionRefused(Phrase(gettext_noop("choose one of the options the agent offered")))
    if len(text) > ANSWER_MAX:
        raise DecisionRefused(
            Phrase(gettext_noop("an answer has at most %(most)s characters"), {"most": ANSWER_MAX})
        )
    answer = choice or text
    record: dict[str, Any] = redacted({"answer": answer, "chosen": bool(choice), "answered_by": by})
    return record


QuestionCheck = Callable[[Gate], None]


def _no_check(gate: Gate) -> None:
    return None


def question_answer(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    text: str = "",
    choice: str = "",
    check: QuestionCheck = _no_check,
) -> GateDecided:
    """Answer the question gate `gate_id` and resume its task with the answer, in one
    transaction (a savepoint of the caller's). Raises GateNotOpen when it was answered (or
    expired, or withdrawn) first or changed since the person saw it, DecisionRefused when the
    gate is not a question or the answer does not fit it; whatever `check` raises refuses it."""
    with transaction.atomic():
        gate = locked_open_gate(gate_id, seen_digest=seen_digest)
        if not approval_kind_of(gate).takes_answer:
            raise DecisionRefused(Phrase(gettext_noop("this gate is an approval, not a question")))
        check(gate)
        by = getattr(actor, "username", "") or "system"
        answer = answer_record(question_of(gate.arguments), text=text, choice=choice, by=by)
        approval = {
            **step_approval(gate, gate.arguments, edited=False, actor=actor),
            "answer": answer,
        }
        gate_close(
            gate,
            "approve",
            actor=actor,
            feedback=answer["answer"],
            approved_arguments=gate.arguments,
            approved_digest=approval["args_digest"],
        )
        task_gate_approved(
            task_id=gate.task_id, step_id=gate.step_id, approval=approval, actor=actor
        )
    return GateDecided(gate=gate, approval=approval, closed=True)
