"""A gate decision is one engine command (`agentops.engine.gate_decide`): the gate is locked and
checked before the caller's own check runs, edited arguments are validated against the tool, a
refusal moves nothing, and a second decision finds the gate closed.

Gates are opened by the real runner against the simulated services in this process (`sim`, no
mocks), so each test is rolled back: nothing here needs another process to see its rows.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentops.engine import (
    Choice,
    DecisionRefused,
    GateDecision,
    GateNotOpen,
    gate_decide,
)
from agentops.models import Gate
from agentops.states import GateStatus, TaskStatus
from tests.reviews.builders import gated_refund, open_gate

pytestmark = pytest.mark.django_db


class Refused(Exception):
    pass


def test_the_caller_s_check_runs_on_the_locked_open_gate_and_its_refusal_moves_nothing(
    sim: Any, redis_clean: Any, django_user_model: Any
) -> None:
    gate = open_gate(gated_refund())
    actor = django_user_model.objects.create_user(username="ada")
    seen: list[tuple[int, str]] = []

    def check(locked: Gate) -> None:
        seen.append((locked.pk, locked.status))
        raise Refused("not you")

    with pytest.raises(Refused):
        gate_decide(
            gate_id=gate.pk,
            decision=GateDecision(Choice.APPROVE),
            actor=actor,
            seen_digest=gate.args_digest,
            check=check,
        )

    gate.refresh_from_db()
    assert seen == [(gate.pk, GateStatus.OPEN)]
    assert (gate.status, gate.task.status) == (GateStatus.OPEN, TaskStatus.AWAITING_APPROVAL)


def test_an_approval_closes_the_gate_resumes_the_task_and_a_second_decision_finds_it_closed(
    sim: Any, redis_clean: Any, django_user_model: Any
) -> None:
    gate = open_gate(gated_refund())
    actor = django_user_model.objects.create_user(username="ada")

    decided = gate_decide(
        gate_id=gate.pk,
        decision=GateDecision(Choice.APPROVE, reason="fine"),
        actor=actor,
        seen_digest=gate.args_digest,
    )

    gate.refresh_from_db()
    assert decided.closed and decided.approval is not None
    assert decided.approval["args_digest"] == gate.args_digest == gate.approved_digest
    assert (gate.status, gate.feedback, gate.task.status) == (
        GateStatus.APPROVED,
        "fine",
        TaskStatus.QUEUED,
    )
    with pytest.raises(GateNotOpen, match="already approved"):
        gate_decide(
            gate_id=gate.pk,
            decision=GateDecision(Choice.REJECT, reason="no"),
            actor=actor,
            seen_digest=None,
        )


def test_edited_arguments_the_tool_refuses_and_a_stale_digest_decide_nothing(
    sim: Any, redis_clean: Any, django_user_model: Any
) -> None:
    gate = open_gate(gated_refund())
    actor = django_user_model.objects.create_user(username="ada")

    with pytest.raises(DecisionRefused, match="JSON object"):
        gate_decide(
            gate_id=gate.pk,
            decision=GateDecision(Choice.EDIT, arguments=["not", "an", "object"]),
            actor=actor,
            seen_digest=gate.args_digest,
        )
    with pytest.raises(DecisionRefused):
        gate_decide(
            gate_id=gate.pk,
            decision=GateDecision(Choice.EDIT, arguments={"amount": "lots"}),
            actor=actor,
            seen_digest=gate.args_digest,
        )
    with pytest.raises(GateNotOpen, match="changed since you opened it"):
        gate_decide(
            gate_id=gate.pk,
            decision=GateDecision(Choice.APPROVE),
            actor=actor,
            seen_digest="0" * 64,
        )
    with pytest.raises(DecisionRefused, match="choose abort"):
        gate_decide(
            gate_id=gate.pk,
            decision=GateDecision(Choice.STOP, reason="enough", outcome="explode"),
            actor=actor,
            seen_digest=gate.args_digest,
        )

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
