"""The engine's only calls into `reviews` (the one place the import rule is crossed).

Opening a gate and queueing an audit item happen inside the runner's fenced transaction, so a
gate exists exactly when its task is parked for it; overdue gates are expired by the sweeper; and
policy dry-runs read how long gates took to decide.
"""

from __future__ import annotations

from typing import Any

from agentops.engine.registry import Tool
from agentops.models import Step, Task, ToolCall
from policies.engine import Verdict


def gate_open(
    *,
    task: Task,
    step: Step,
    tool: Tool,
    arguments: dict[str, Any],
    args_digest: str,
    verdict: Verdict,
    edited: bool,
) -> None:
    from reviews.services import gate_open as open_gate

    open_gate(
        task=task,
        step=step,
        tool=tool.name,
        side_effect=tool.side_effect,
        arguments=arguments,
        args_digest=args_digest,
        verdict=verdict,
        edited=edited,
    )


def audit_item_create(
    *, task: Task, step: Step, call: ToolCall, verdict: Verdict, sampled: bool
) -> None:
    from reviews.services import audit_item_create as create

    create(task=task, step=step, call=call, verdict=verdict, sampled=sampled)


def audit_item_follow(*, from_call_id: int, to_call: ToolCall) -> int:
    from reviews.services import audit_item_follow as follow

    return follow(from_call_id=from_call_id, to_call=to_call)


def gates_withdraw(*, task_id: int, because: str) -> int:
    from reviews.services import gates_withdraw as withdraw

    return withdraw(task_id=task_id, because=because)


def gates_expire_overdue() -> int:
    from reviews.services import gates_expire_overdue as expire

    return expire()


def stopped_tasks_escalate_overdue() -> int:
    from reviews.services import stopped_tasks_escalate_overdue as escalate

    return escalate()


def gate_decision_seconds(step_ids: list[int]) -> dict[int, float]:
    """How long people took to decide the gates of these steps (for dry-run reviewer load)."""
    from reviews.models import Gate

    rows = Gate.objects.filter(step_id__in=step_ids, decided_at__isnull=False).values_list(
        "step_id", "created_at", "decided_at"
    )
    return {step: (decided - created).total_seconds() for step, created, decided in rows}
