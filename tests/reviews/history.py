"""Builders of known history for the figures' tests: tasks, steps, events, gates, decisions and
audit items written with the timestamps a test chooses.

A `Clock` replaces `django.utils.timezone.now` (what `auto_now_add` and the services read), so
rows get exactly the times the test sets; decisions go through the real `decision_record`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from agentops.models import AuditItem, Event, Gate, Step, Task, ToolCall
from agentops.states import TaskStatus
from reviews.models import Decision
from reviews.services import decision_record
from reviews.states import VIA_BROWSER
from tests.statuses import status_walk

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def at(self, when: datetime) -> Clock:
        self.now = when
        return self


def make_task(
    clock: Clock,
    *,
    at: datetime = T0,
    agent: str = "refund",
    status: str = TaskStatus.SUCCEEDED,
    step_count: int = 3,
    current_step: int | None = None,
    failure_kind: str | None = None,
    tokens_used: int = 0,
    **overrides: Any,
) -> Task:
    clock.at(at)
    if current_step is None:
        current_step = step_count if status == TaskStatus.SUCCEEDED else 0
    task = Task.objects.create(
        agent=agent,
        goal=f"{agent} task",
        step_count=step_count,
        current_step=current_step,
        failure={"layer": "test", "kind": failure_kind} if failure_kind else None,
        tokens_used=tokens_used,
        **overrides,
    )
    # A task starts queued (the database insists): walk it to `status` along legal transitions.
    status_walk(task, status)
    return task


def make_step(
    task: Task,
    ordinal: int,
    *,
    confidence: float | None = None,
    rule: str = "",
    route: str = "",
    tool: str = "issue_refund",
) -> Step:
    response = {"text": "", "tool_calls": [{"name": tool, "arguments": {}}]}
    if confidence is not None:
        response["confidence"] = confidence
    return Step.objects.create(
        task=task,
        ordinal=ordinal,
        title=f"step {ordinal + 1}",
        model_response=response,
        route=route,
        policy_rule=rule,
    )


def make_events(task: Task, *events: tuple[str, int | None, dict[str, Any]]) -> None:
    """Append (action, step ordinal, payload) events to `task`'s log, numbered from 1."""
    Event.objects.bulk_create(
        Event(task=task, seq=i, action=action, step_ordinal=step, payload=payload)
        for i, (action, step, payload) in enumerate(events, start=1)
    )


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def make_gate(
    clock: Clock,
    task: Task,
    *,
    opened: datetime,
    rule: str = "large payment",
    status: str = "open",
    decided: datetime | None = None,
    due_seconds: int = 3600,
    ordinal: int | None = None,
) -> Gate:
    if ordinal is None:
        ordinal = Step.objects.filter(task=task).count()
    step = Step.objects.filter(task=task, ordinal=ordinal).first() or make_step(task, ordinal)
    clock.at(opened)
    return Gate.objects.create(
        task=task,
        step=step,
        tool="issue_refund",
        arguments={"amount": 108},
        args_digest="0" * 64,
        rule=rule,
        status=status,
        due_at=opened + timedelta(seconds=due_seconds),
        decided_at=decided,
    )


def decide(
    clock: Clock,
    *,
    actor: Any,
    action: str,
    at: datetime,
    gate: Gate | None = None,
    item: AuditItem | None = None,
    bulk: bool = False,
) -> Decision:
    clock.at(at)
    detail: dict[str, Any] = {}
    if gate is not None:
        detail["gate"] = gate.pk
    if item is not None:
        detail["item"] = item.pk
    if bulk:
        detail["bulk"] = True
    task_id = gate.task_id if gate is not None else item.task_id if item is not None else None
    return decision_record(
        action=action, actor=actor, subject=action, task_id=task_id, detail=detail, via=VIA_BROWSER
    )


_calls = iter(range(1, 1_000_000))


def make_call(
    clock: Clock,
    task: Task,
    step: Step,
    *,
    at: datetime = T0,
    tool: str = "issue_refund",
) -> ToolCall:
    clock.at(at)
    n = next(_calls)
    return ToolCall.objects.create(
        task=task,
        step=step,
        tool=tool,
        side_effect="financial",
        args={"n": n},
        args_digest=f"{n:064d}",
        idempotency_key=f"test-{task.pk}-{step.pk}-{n}",
    )


def make_audit_item(
    clock: Clock,
    task: Task,
    *,
    at: datetime = T0,
    rule: str = "small payment",
    route: str = "audit",
    sampled: bool = False,
    status: str = "pending",
    confidence: float | None = None,
    ordinal: int | None = None,
    tool: str = "issue_refund",
) -> AuditItem:
    if ordinal is None:
        ordinal = Step.objects.filter(task=task).count()
    step = make_step(task, ordinal, confidence=confidence, rule=rule, route=route, tool=tool)
    call = make_call(clock, task, step, at=at, tool=tool)
    clock.at(at)
    return AuditItem.objects.create(
        task=task,
        step=step,
        tool_call=call,
        agent=task.agent,
        tool=tool,
        route=route,
        sampled=sampled,
        rule=rule,
        status=status,
    )


def real_now() -> datetime:
    return timezone.localtime()
