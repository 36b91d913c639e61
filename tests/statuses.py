"""Put a task or step row into a chosen status the way the database allows it.

The triggers of migration 0008 refuse a status change the transition table does not allow and a
row inserted in any status but the initial one, so fixtures that need a task in, say,
`succeeded` (history for the figures, a child finished "by an older release") walk it there along
the shortest path of legal transitions, with raw UPDATEs: no events, no hooks.
"""

from __future__ import annotations

from collections import deque

from agentops.models import Step, Task
from agentops.states import STEP_TRANSITIONS, TASK_TRANSITIONS, Transition


def transition_path(table: dict[str, Transition], source: str, target: str) -> list[str]:
    """The statuses after `source` on a shortest legal path to `target` ([] when equal)."""
    previous: dict[str, str | None] = {source: None}
    queue = deque([source])
    while queue:
        status = queue.popleft()
        if status == target:
            path = []
            while status != source:
                path.append(status)
                status = previous[status]  # type: ignore[assignment]
            return path[::-1]
        for spec in table.values():
            if status in spec.sources and spec.target not in previous:
                previous[spec.target] = status
                queue.append(spec.target)
    raise ValueError(f"no legal path from {source} to {target}")


def status_walk(row: Task | Step, target: str) -> None:
    """Move `row` to `target` along legal transitions (raw UPDATEs); mirror it on `row`."""
    model = type(row)
    table = TASK_TRANSITIONS if model is Task else STEP_TRANSITIONS
    current = model.objects.filter(pk=row.pk).values_list("status", flat=True).get()
    for status in transition_path(table, current, target):
        model.objects.filter(pk=row.pk).update(status=status)
    row.status = target
