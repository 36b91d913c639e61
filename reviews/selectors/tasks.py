"""Small reads about one task for the review section of its page: whether it exists, its open gate,
and the controls its status allows (from the task transition table).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentops.models import Gate, Task
from agentops.states import TASK_TRANSITIONS, GateStatus, TaskStatus

if TYPE_CHECKING:
    pass


def task_exists(*, task_id: int) -> bool:
    return Task.objects.filter(pk=task_id).exists()


def task_open_gate_id(*, task_id: int) -> int | None:
    return (
        Gate.objects.filter(task_id=task_id, status=GateStatus.OPEN)
        .values_list("pk", flat=True)
        .first()
    )


def task_controls_for(status: str) -> list[str]:
    """Pause / resume / cancel offered for a task in `status`, from the transition table."""
    controls = []
    if status in TASK_TRANSITIONS["pause"].sources:
        controls.append("pause")
    if status == TaskStatus.PAUSED:
        controls.append("resume")
    if status in TASK_TRANSITIONS["abort"].sources:
        controls.append("cancel")
    return controls
