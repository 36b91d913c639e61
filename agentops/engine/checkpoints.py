"""Full-tier checkpoints: snapshots, the fold of later events, and the check against the rows.

A snapshot records the task's progress state (status, progress pointer, every step's status and
output digest, every ledger row's status) as of an event `seq`. Step contents stay in their rows and
are referenced by digest, so a snapshot grows with the number of steps, not with their payloads.
Resume folds the events after the latest snapshot onto it and requires the result to equal the rows.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import CheckpointMismatch
from agentops.engine.jsonvalues import digest
from agentops.engine.transitions import prepared_rows
from agentops.models import Event, Snapshot, Step, Task, ToolCall
from agentops.states import LedgerStatus


def progress_state(task: Task, steps: list[Step], calls: list[ToolCall]) -> dict[str, Any]:
    """The part of the task state that snapshots record and events fold onto."""
    return {
        "status": task.status,
        "current_step": task.current_step,
        "steps": {str(s.ordinal): s.status for s in steps},
        "ledger": {c.idempotency_key: c.status for c in calls if c.status != "failed"},
    }


def snapshot_state(task: Task, steps: list[Step], calls: list[ToolCall]) -> dict[str, Any]:
    state = progress_state(task, steps, calls)
    state["meta"] = {
        "agent": task.agent,
        "step_count": task.step_count,
        "recoveries": task.recoveries,
        "tokens_used": task.tokens_used,
        "cost_used": str(task.cost_used),
    }
    # One digest over the outputs in step order: a snapshot stays a few bytes per step.
    state["outputs_digest"] = digest([s.output for s in steps if s.output is not None])
    return state


def snapshot_write(*, task_id: int, seq: int) -> Snapshot:
    """Write a snapshot of the rows as of `seq`. Caller holds the lease, in its transaction."""
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task_id=task_id).order_by("ordinal"))
    calls = list(ToolCall.objects.filter(task_id=task_id).order_by("id"))
    snapshot = Snapshot.objects.create(
        task_id=task_id, seq=seq, state=snapshot_state(task, steps, calls)
    )
    crashpoint("during_snapshot")
    return snapshot


def fold(state: dict[str, Any], changes: Iterable[dict[str, Any] | None]) -> dict[str, Any]:
    """Apply each event's `fold` payload (None for an event without one), in seq order, to a
    copy of a snapshot's state."""
    folded = {
        "status": state["status"],
        "current_step": state["current_step"],
        "steps": dict(state["steps"]),
        "ledger": dict(state["ledger"]),
    }
    for change in changes:
        if not change:
            continue
        for key in ("status", "current_step"):
            if key in change:
                folded[key] = change[key]
        folded["steps"].update(change.get("steps", {}))
        for key, status in change.get("ledger", {}).items():
            if status == LedgerStatus.FAILED:
                folded["ledger"].pop(key, None)
            else:
                folded["ledger"][key] = status
    return folded


def checkpoint_verify(task: Task, steps: list[Step], calls: list[ToolCall]) -> int:
    """Fold the latest snapshot with the events after it; raise CheckpointMismatch if the rows
    disagree. Returns the snapshot's seq."""
    found = prepared_rows(_latest_snapshot_and_folds(), [task.pk])
    if not found:
        raise CheckpointMismatch(f"task {task.pk} has no snapshot")
    seq, state, changes, events = found[0]
    expected = fold(json.loads(state), json.loads(changes) if changes is not None else [])
    actual = progress_state(task, steps, calls)
    if expected != actual:
        differences = sorted(key for key in expected if expected[key] != actual.get(key))
        raise CheckpointMismatch(
            f"task {task.pk}: snapshot #{seq} + {events} events disagree with the rows on "
            f"{', '.join(differences)}"
        )
    return int(seq)


@functools.cache
def _latest_snapshot_and_folds() -> str:
    """One read for the check: the latest snapshot's seq and state, the `fold` payloads of the
    events after it in seq order (JSON null for an event without one), and how many they are."""
    snapshot, event = Snapshot._meta.db_table, Event._meta.db_table
    return (
        f'SELECT s."seq", s."state", f."changes", f."events" FROM "{snapshot}" s CROSS JOIN '
        f'LATERAL (SELECT jsonb_agg(e."payload" -> \'fold\' ORDER BY e."seq") AS "changes", '
        f'count(*) AS "events" FROM "{event}" e WHERE e."task_id" = s."task_id" AND '
        'e."seq" > s."seq") f WHERE s."task_id" = %s ORDER BY s."seq" DESC LIMIT 1'
    )
