"""A channel is one class registered by its name (`reviews.channels`). This module defines a
channel no other file knows (a pager), registers it for its own tests only, and sees it receive
notices through delivery and decide a gate through the one decision service, its name recorded on
the decision; the built-in channels ask the gate's approval kind what they may offer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from agentops.engine import Choice, approval_kind_of
from agentops.models import Gate
from agentops.states import GateStatus, TaskStatus
from reviews.channels import (
    Audience,
    Channel,
    channel_get,
    channel_label,
    channel_register,
    channel_unregister,
    channels,
)
from reviews.models import Decision, Delivery, Notice
from reviews.notifications import delivery_send, notices_find
from reviews.services import (
    GateAlreadyDecided,
    NotAllowed,
    ReviewError,
    gate_decide,
    gate_decide_check,
)
from reviews.states import DeliveryStatus, NoticeEvent
from tests.factories import gated_refund_row
from tests.reviews.builders import asked_question, open_gate

pytestmark = pytest.mark.django_db


class Pager(Channel):
    """Pages each person of a notice's audience, and takes Approve and Reject from the pager."""

    name = "pager"
    label = "Pager"
    choices: ClassVar[tuple[Choice, ...]] = (Choice.APPROVE, Choice.REJECT)

    def __init__(self) -> None:
        self.paged: list[tuple[str, str, str]] = []

    def deliveries(self, notice: Notice, audience: Audience) -> list[Delivery]:
        return [
            Delivery(notice=notice, channel=self.name, user=person, next_attempt_at=audience.now)
            for person in audience.people
        ]

    def deliver(self, delivery: Delivery, link: str) -> None:
        assert delivery.user is not None
        self.paged.append((delivery.user.get_username(), delivery.notice.event, link))

    def press(self, gate: Gate, *, user: Any, choice: Choice, reason: str = "") -> None:
        """A person's key press on the pager: the one decision service, with this channel."""
        gate_decide(
            gate_id=gate.pk,
            choice=choice,
            actor=user,
            seen_digest=gate.args_digest,
            reason=reason,
            via=self.via(),
        )


@pytest.fixture
def pager() -> Iterator[Pager]:
    channel = Pager()
    channel_register(channel)
    yield channel
    channel_unregister(channel.name)


def test_a_registered_channel_receives_a_gates_notice_through_delivery(
    pager, redis_clean, operator, operator2, starter
):
    gate = open_gate(gated_refund_row(created_by=starter))

    notices_find()

    paged = Delivery.objects.filter(channel="pager", notice__gate=gate)
    # The gate's approver group, not the task's starter (separation of duties).
    assert {d.user for d in paged} == {operator, operator2}
    for delivery in paged:
        assert delivery_send(delivery_id=delivery.pk) == "sent"
    assert sorted(who for who, _, _ in pager.paged) == ["olga", "otto"]
    assert {event for _, event, _ in pager.paged} == {NoticeEvent.GATE_OPENED}
    assert all(link.endswith(f"/gates/{gate.pk}") for _, _, link in pager.paged)
    assert set(paged.values_list("status", flat=True)) == {DeliveryStatus.SENT}


def test_a_registered_channel_decides_a_gate_through_the_one_service_and_is_on_the_decision(
    pager, redis_clean, operator, starter
):
    gate = open_gate(gated_refund_row(created_by=starter))

    pager.press(gate, user=operator, choice=Choice.APPROVE, reason="paged at night")

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.APPROVED
    (decision,) = Decision.objects.filter(task_id_ref=gate.task_id, action="reviews.gate.approved")
    assert decision.channel == "pager"
    assert decision.actor == operator
    assert decision.reason == "paged at night"
    assert channel_label(decision.channel) == "Pager"


def test_a_registered_channel_gets_the_same_refusals_as_every_channel(
    pager, redis_clean, operator, starter
):
    gate = open_gate(gated_refund_row(created_by=starter))

    with pytest.raises(NotAllowed, match="someone else must decide"):
        pager.press(gate, user=starter, choice=Choice.APPROVE)
    with pytest.raises(ReviewError, match="say why"):
        pager.press(gate, user=operator, choice=Choice.REJECT)
    pager.press(gate, user=operator, choice=Choice.REJECT, reason="wrong order")
    with pytest.raises(GateAlreadyDecided):
        pager.press(gate, user=operator, choice=Choice.APPROVE)

    assert list(
        Decision.objects.filter(task_id_ref=gate.task_id).values_list("action", "channel")
    ) == [("reviews.gate.rejected", "pager")]
    assert Gate.objects.get(pk=gate.pk).task.status != TaskStatus.AWAITING_APPROVAL


def test_an_unregistered_channels_pending_delivery_fails_its_attempt_with_why(
    redis_clean, operator, starter
):
    channel = Pager()
    channel_register(channel)
    try:
        open_gate(gated_refund_row(created_by=starter))
        notices_find()
    finally:
        channel_unregister(channel.name)
    delivery = Delivery.objects.get(channel="pager", user=operator)

    assert delivery_send(delivery_id=delivery.pk) == "attempt 1 failed"

    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING
    assert delivery.attempts == 1
    assert "no channel named 'pager' is registered" in delivery.last_error
    assert channel.paged == []


def test_the_built_in_channels_are_registered_in_their_fan_out_order(pager):
    assert [c.name for c in channels()] == ["email", "webhook", "slack", "browser", "api", "pager"]
    assert channel_register(Pager()) is pager  # the same class again: harmless
    with pytest.raises(ValueError, match="registered already"):
        channel_register(type("OtherPager", (Pager,), {})())
    with pytest.raises(LookupError):
        channel_get("carrier pigeon")


def test_channels_offer_what_the_gates_approval_kind_offers(sim, redis_clean, starter):
    gate = open_gate(gated_refund_row(created_by=starter))
    question = asked_question(created_by=starter)

    assert channel_get("slack").choices_for(gate) == (Choice.APPROVE, Choice.REJECT)
    assert channel_get("email").choices_for(gate) == (Choice.APPROVE, Choice.REJECT)
    assert Choice.ANSWER not in channel_get("api").choices_for(gate)
    # An agent's question is answered, never approved: the channels that take no answer offer
    # nothing for it; the browser and the API offer the answer and declining it.
    assert approval_kind_of(question).takes_answer
    assert channel_get("slack").choices_for(question) == ()
    assert channel_get("email").choices_for(question) == ()
    assert channel_get("browser").choices_for(question) == (
        Choice.REJECT,
        Choice.STOP,
        Choice.ANSWER,
    )
    assert channel_get("api").choices_for(question) == (Choice.REJECT, Choice.ANSWER)


def test_every_choice_through_the_one_service_records_the_channel_it_came_through(
    sim, pager, redis_clean, operator, starter
):
    edited = open_gate(gated_refund_row(created_by=starter))
    stopped = open_gate(gated_refund_row(created_by=starter, order_id="B2003"))
    question = asked_question(created_by=starter)
    common = {"actor": operator, "via": pager.via()}

    gate_decide(
        gate_id=edited.pk,
        choice=Choice.EDIT,
        seen_digest=edited.args_digest,
        arguments={**edited.arguments, "amount": 100.0},
        reason="cap it",
        **common,
    )
    gate_decide(
        gate_id=stopped.pk,
        choice=Choice.STOP,
        seen_digest=stopped.args_digest,
        outcome="abort",
        reason="duplicate",
        **common,
    )
    gate_decide(
        gate_id=question.pk,
        choice=Choice.ANSWER,
        seen_digest=question.args_digest,
        option="half",
        **common,
    )

    logged = dict(
        Decision.objects.filter(
            action__in=[
                "reviews.gate.edited",
                "reviews.gate.rejected_and_stopped",
                "reviews.question.answered",
            ]
        ).values_list("action", "channel")
    )
    assert logged == {
        "reviews.gate.edited": "pager",
        "reviews.gate.rejected_and_stopped": "pager",
        "reviews.question.answered": "pager",
    }
    assert Gate.objects.get(pk=question.pk).feedback == "half"


def test_the_checks_of_a_decision_refuse_as_the_decision_would_and_decide_nothing(
    sim, redis_clean, operator, starter
):
    gate = open_gate(gated_refund_row(created_by=starter))
    question = asked_question(created_by=starter)

    assert gate_decide_check(gate_id=gate.pk, choice=Choice.REJECT, actor=operator) == gate
    with pytest.raises(NotAllowed, match="someone else must decide"):
        gate_decide_check(gate_id=gate.pk, choice=Choice.APPROVE, actor=starter)
    with pytest.raises(GateAlreadyDecided, match="changed since you opened it"):
        gate_decide_check(
            gate_id=gate.pk, choice=Choice.APPROVE, actor=operator, seen_digest="0" * 64
        )
    with pytest.raises(ReviewError, match="answer it"):
        gate_decide_check(gate_id=question.pk, choice=Choice.APPROVE, actor=operator)
    with pytest.raises(Gate.DoesNotExist):
        gate_decide_check(gate_id=10**9, choice=Choice.APPROVE, actor=operator)
    gate_decide(
        gate_id=gate.pk,
        choice=Choice.REJECT,
        actor=operator,
        seen_digest=gate.args_digest,
        reason="no",
    )
    with pytest.raises(GateAlreadyDecided, match="already rejected"):
        gate_decide_check(gate_id=gate.pk, choice=Choice.APPROVE, actor=operator)

    assert list(Decision.objects.values_list("action", flat=True)) == ["reviews.gate.rejected"]
