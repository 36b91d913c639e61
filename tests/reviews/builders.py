"""Builders of the review tests: tasks brought into each state by the real engine against the
simulated services (no mocks), signed-in clients, and decision-log rows in bulk for the read side.
"""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.utils import timezone

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create
from agentops.models import Gate, Task
from agentops.states import GateStatus, TaskStatus
from reviews.models import Decision, Delivery, Notice, SlackIdentity, WebhookEndpoint
from reviews.services.slack import slack_identity_link, slack_link_token
from reviews.states import DecisionChannel, DeliveryChannel, NoticeEvent
from tests.builders import run_until_parked_or_done, signed_in
from tests.slack_api import TEAM_ID, StandInSlack
from tests.statuses import status_walk


def client_for(user: Any, *, enforce_csrf_checks: bool = False) -> Client:
    return signed_in(Client(enforce_csrf_checks=enforce_csrf_checks), user)


def slack_linked(slack: StandInSlack, user: Any, slack_user_id: str) -> SlackIdentity:
    """`user` links the Slack account `slack_user_id` as a person does: a member of the stand-in
    Slack's workspace with `user`'s email (`<username>@example.com` when `user` has none), linked
    through the link the Slack app sends, which Slack confirms."""
    if not user.email:
        user.email = f"{user.username}@example.com"
        user.save(update_fields=["email"])
    slack.member_add(slack_user_id, email=user.email)
    token = slack_link_token(team_id=TEAM_ID, slack_user_id=slack_user_id)
    return slack_identity_link(user=user, token=token)


def gated_refund(
    *, created_by: Any = None, order_id: str = "B2002", goal: str = "", **input_extra: Any
) -> Task:
    """A refund whose payment step waits at a gate (B2002 is 108 EUR: above the 100 limit)."""
    task = task_create(
        agent="refund",
        goal=goal or f"Refund order {order_id}",
        input={"order_id": order_id, **input_extra},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.AWAITING_APPROVAL
    return task


def open_gate(task: Task) -> Gate:
    return Gate.objects.get(task=task, status=GateStatus.OPEN)


def asked_question(*, created_by: Any = None, note: str = "the lid is cracked") -> Gate:
    """The open question of a refund_ask task: how much to refund for the damaged A1001."""
    task = task_create(
        agent="refund_ask",
        goal="Refund the damaged item of A1001",
        input={"order_id": "A1001", "note": note},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.AWAITING_APPROVAL
    return open_gate(task)


def stopped_trip(*, created_by: Any = None, goal: str = "Trip to Lisbon") -> Task:
    """A trip stopped in needs_attention after the flight was booked (the hotel refused)."""
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    task = task_create(agent="trip", goal=goal, input={"traveller": "Ada"}, created_by=created_by)
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def gated_trip(*, created_by: Any = None) -> Task:
    """A trip to Lisbon whose flight booking waits at a gate: the cheapest fare is 472, above the
    100 limit, and the flight's arguments name no currency."""
    task = task_create(
        agent="trip",
        goal="Trip to Lisbon",
        input={"traveller": "Bob", "destination": "LIS"},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.AWAITING_APPROVAL
    return task


def unknown_refund(settings: Any, *, created_by: Any = None) -> Task:
    """A refund through the legacy API whose call timed out after executing: executed_unknown."""
    settings.AGENTOPS = {**settings.AGENTOPS, "TOOL_TIMEOUT_SECONDS": 0.8}
    fault_set(
        service="payments",
        operation="refund_legacy",
        mode="execute_then_timeout",
        count=1,
        delay=1.5,
    )
    task = task_create(
        agent="refund",
        goal="Refund A1001 through the legacy API",
        input={"order_id": "A1001", "refund_api": "legacy"},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def audited_refund(*, goal: str = "Refund order A1001", created_by: Any = None) -> Task:
    """A1001 (56 EUR) runs through; its refund and its email are queued for audit."""
    task = task_create(
        agent="refund", goal=goal, input={"order_id": "A1001"}, created_by=created_by
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    return task


def effects(service: str, operation: str) -> int:
    return Effect.objects.filter(service=service, operation=operation).count()


def due_delivery(*, user: Any = None, endpoint: WebhookEndpoint | None = None) -> Delivery:
    """One delivery due now, by email to `user` or to the webhook `endpoint`, of a notice about
    a finished task (rows built directly: no engine, no sweep)."""
    task = Task.objects.create(agent="bench_noop", goal="Notified task", step_count=1)
    status_walk(task, TaskStatus.SUCCEEDED)
    notice = Notice.objects.create(
        event=NoticeEvent.TASK_STOPPED,
        subject=f"task:{task.pk}@1",
        task=task,
        text=f"Task {task.pk} stopped for a human.",
        link=f"/review/tasks/{task.pk}/recover",
    )
    return Delivery.objects.create(
        notice=notice,
        channel=DeliveryChannel.EMAIL if user is not None else DeliveryChannel.WEBHOOK,
        user=user,
        endpoint=endpoint,
        next_attempt_at=timezone.now(),
    )


def decisions_logged(
    *,
    count: int,
    actor_label: str = "olga",
    reason: str = "",
    channel: DecisionChannel = DecisionChannel.BROWSER,
    api_token_id: int | None = None,
    batch_size: int = 5000,
) -> int:
    """`count` approvals written straight into the decision log with bulk_create: the read side
    (the log, its exports) needs many rows, not the engine that decides them. The log refuses
    UPDATE and DELETE, not INSERT. Returns `count`."""
    Decision.objects.bulk_create(
        (
            Decision(
                action="reviews.gate.approved",
                actor_label=actor_label,
                task_id_ref=n,
                subject=f"gate {n}: issue_refund",
                before_digest=f"{n:064x}",
                after_digest=f"{n:064x}",
                reason=reason,
                channel=channel,
                api_token_id=api_token_id,
            )
            for n in range(1, count + 1)
        ),
        batch_size=batch_size,
    )
    return count
