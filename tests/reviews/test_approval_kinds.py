"""Approval kinds: the strategy a gate's decision asks (open / may decide / is satisfied).

`OneApprover` behaves as gates always did: one person of the approver group decides, and that
one approval closes the gate. The real two-person kind (`TwoApprovers`, four eyes) is tested in
`test_four_eyes.py`. A kind defined only in this module (any two distinct approvers of the group,
its approvals kept in memory, no migration) shows that a new kind is still just a class: the
engine's decision, the role check and the gate panel ask the gate's kind, and nothing else
changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.urls import reverse

from agentops.engine import (
    QUESTION,
    Approval,
    ApprovalKind,
    Choice,
    OneApprover,
    TwoApprovers,
    approval_kind_of,
    approval_kinds_offering,
)
from agentops.engine.approvals import APPROVAL_KINDS
from agentops.models import Gate
from agentops.states import GateStatus, TaskStatus
from reviews.models import Decision
from reviews.roles import gate_decider_refusal
from reviews.selectors import gate_get_panel
from reviews.services import (
    NotAllowed,
    ReviewError,
    gate_answer,
    gate_approve,
    gate_edit_and_approve,
)
from tests.reviews.builders import asked_question, client_for, gated_refund, open_gate

# The unit tests below read no row; the two that decide a gate run the real runner, against the
# simulated services in this process (`sim`): rolled back, like every test no other process reads.
the_runner = pytest.mark.django_db


def test_a_gate_is_of_the_one_approver_kind_unless_it_says_otherwise() -> None:
    gate = Gate(approver_group="leads", status=GateStatus.OPEN)

    assert Gate._meta.get_field("approval_kind").default == OneApprover.name
    assert isinstance(approval_kind_of(gate), OneApprover)


def test_one_approver_is_one_person_of_the_approver_group_and_one_approval() -> None:
    kind, gate = OneApprover(), Gate(pk=7, approver_group="leads", status=GateStatus.OPEN)
    someone = User(username="lee")
    approval = Approval(by="lee", user_id=1, args_digest="d")

    assert kind.may_decide(gate, user=someone, groups=frozenset({"leads"})) is None
    assert kind.may_decide(gate, user=someone, groups=frozenset({"operators"})) == (
        "only members of 'leads' may decide this gate"
    )
    assert kind.is_open(gate) and not kind.is_open(Gate(status=GateStatus.APPROVED))
    assert kind.approvals_of(gate) == ()
    assert kind.is_satisfied(gate, [approval]) and not kind.is_satisfied(gate, [])


def test_each_kind_says_which_choices_it_offers_and_which_kinds_take_an_answer() -> None:
    one, two, question = (
        approval_kind_of(Gate(approval_kind=name))
        for name in (OneApprover.name, TwoApprovers.name, QUESTION)
    )

    for kind in (one, two):
        assert kind.choices == {Choice.APPROVE, Choice.EDIT, Choice.REJECT, Choice.STOP}
        assert kind.offers(Choice.APPROVE) and not kind.takes_answer
    assert question.choices == {Choice.ANSWER, Choice.REJECT, Choice.STOP}
    assert question.takes_answer and not question.offers(Choice.APPROVE)
    assert "answer it" in question.choice_refusal(Choice.EDIT)
    assert approval_kinds_offering(Choice.ANSWER) == (QUESTION,)
    assert set(approval_kinds_offering(Choice.APPROVE)) >= {OneApprover.name, TwoApprovers.name}


@the_runner
def test_the_decision_refuses_a_choice_the_gates_kind_does_not_offer(
    sim, redis_clean, operator
) -> None:
    question = asked_question()

    with pytest.raises(ReviewError, match="approving it would give the agent no answer"):
        gate_edit_and_approve(
            gate_id=question.pk,
            actor=operator,
            seen_digest=question.args_digest,
            arguments={"question": "something else?"},
        )
    with pytest.raises(ReviewError, match="is an approval, not a question"):
        gate_answer(
            gate_id=open_gate(gated_refund()).pk, actor=operator, seen_digest=None, text="yes"
        )

    assert Gate.objects.get(pk=question.pk).status == GateStatus.OPEN
    assert not Decision.objects.filter(action__startswith="reviews.gate").exists()


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(LookupError, match="'nobody_knows'"):
        approval_kind_of(Gate(pk=3, approval_kind="nobody_knows"))


@the_runner
def test_one_approval_of_the_group_closes_the_gate_as_before(
    sim: Any, redis_clean: Any, operator: Any, starter: Any
) -> None:
    gate = open_gate(gated_refund(created_by=starter))

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    gate.refresh_from_db()
    assert gate.approval_kind == OneApprover.name
    assert (gate.status, gate.decided_by, gate.task.status) == (
        GateStatus.APPROVED,
        operator,
        TaskStatus.QUEUED,
    )


class InMemoryTwoApprovers(ApprovalKind):
    """Two distinct people of the approver group: the first approval is kept, the second closes
    the gate. (Kept in memory here; the real `TwoApprovers` keeps them on the gate.)"""

    name = "two_approvers_test"
    label = "two approvers"

    def __init__(self) -> None:
        self.kept: dict[int, list[Approval]] = {}

    def may_decide(
        self, gate: Gate, *, user: User | AnonymousUser, groups: frozenset[str]
    ) -> str | None:
        if gate.approver_group not in groups:
            return f"only members of {gate.approver_group!r} may decide this gate"
        if any(a.user_id == user.pk for a in self.approvals_of(gate)):
            return "you approved this already; a second person must approve too"
        return None

    def approvals_of(self, gate: Gate) -> tuple[Approval, ...]:
        return tuple(self.kept.get(gate.pk, []))

    def approval_record(self, gate: Gate, approval: Approval) -> None:
        self.kept.setdefault(gate.pk, []).append(approval)

    def is_satisfied(self, gate: Gate, approvals: Sequence[Approval]) -> bool:
        return len({a.user_id for a in approvals}) >= 2


@the_runner
def test_a_new_kind_is_a_class_the_decision_the_role_check_and_the_panel_ask(
    sim: Any,
    redis_clean: Any,
    operator: Any,
    operator2: Any,
    starter: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kind = InMemoryTwoApprovers()
    monkeypatch.setitem(APPROVAL_KINDS, kind.name, kind)
    gate = open_gate(gated_refund(created_by=starter))
    Gate.objects.filter(pk=gate.pk).update(approval_kind=kind.name)

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    gate.refresh_from_db()
    assert (gate.status, gate.task.status) == (GateStatus.OPEN, TaskStatus.AWAITING_APPROVAL)
    assert gate_get_panel(gate_id=gate.pk).is_open
    assert gate_decider_refusal(gate, operator) == (
        "you approved this already; a second person must approve too"
    )
    with pytest.raises(NotAllowed, match="a second person"):
        gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    response = client_for(operator2).post(
        reverse("reviews:gate_approve", args=[gate.pk]), {"seen_digest": gate.args_digest}
    )

    gate.refresh_from_db()
    assert response.status_code == 302
    assert (gate.status, gate.decided_by, gate.task.status) == (
        GateStatus.APPROVED,
        operator2,
        TaskStatus.QUEUED,
    )
    assert [a.by for a in kind.approvals_of(gate)] == ["olga"]
    assert list(
        Decision.objects.filter(task_id_ref=gate.task_id, action="reviews.gate.approved")
        .order_by("id")
        .values_list("actor_label", flat=True)
    ) == ["olga", "otto"]
