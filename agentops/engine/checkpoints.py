"""Full-tier checkpoints: snapshots, the fold of later events, and the check against the rows.

A snapshot records the task's progress state (status, progress pointer, every step's status and
output digest, every ledger row's status) as of an event `seq`. Step contents stay in their rows and
are referenced by digest, so a snapshot grows with the number of steps, not with their payloads.
Resume folds the events after the latest snapshot onto it and requires the result to equal the rows.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentops.engine.chains import ChainBreak
from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import CheckpointMismatch
from agentops.engine.jsonvalues import encoded
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


class OutputsDigest:
    """`digest(outputs)`, made incrementally: a run's snapshots digest the outputs of every
    completed step, and the next snapshot's list starts with the previous one's. The canonical
    JSON of a list is its items' joined (`[a,b]`), so the hash state after the items digested
    last time is carried on while those items are the same objects (identity means the same
    recorded values, as in the prompt cache); anything else starts over. The outputs are kept
    (not their ids), so their ids cannot be reused by other objects."""

    def __init__(self) -> None:
        self._outputs: list[Any] = []
        self._hash = hashlib.sha256(b"[")
        self.each: list[str] = []  # each output's own digest (`output_digest`), in order

    def __call__(self, outputs: list[Any]) -> str:
        done = self._outputs
        if len(done) > len(outputs) or not all(map(operator.is_, done, outputs)):
            done, self._hash, self.each = [], hashlib.sha256(b"["), []
        for output in outputs[len(done) :]:
            data = encoded(output).data
            self._hash.update(b"," if done else b"")
            self._hash.update(data)
            self.each.append(hashlib.sha256(data).hexdigest()[:16])
            done.append(output)
        self._outputs = done
        final = self._hash.copy()
        final.update(b"]")
        return final.hexdigest()


def output_digest(output: Any) -> str:
    """A step output's digest, as a snapshot's `output_digests` records it: 64 bits of its
    sha256, enough to name the step whose output changed (the whole list's digest,
    `outputs_digest`, is the full 256)."""
    return hashlib.sha256(encoded(output).data).hexdigest()[:16]


def snapshot_state(
    task: Task,
    steps: list[Step],
    calls: list[ToolCall],
    outputs_digest: OutputsDigest | None = None,
) -> dict[str, Any]:
    """The snapshot of the task, its steps and its ledger rows; `outputs_digest`: a run's own
    (it reuses what the run's earlier snapshots digested), else a new one."""
    state = progress_state(task, steps, calls)
    state["meta"] = {
        "agent": task.agent,
        "step_count": task.step_count,
        "recoveries": task.recoveries,
        "tokens_used": task.tokens_used,
        "cost_used": str(task.cost_used),
    }
    # One digest over the outputs in step order, and one per output: a snapshot stays a few
    # bytes per step, and a changed output is named (`outputs_compare`).
    digested = OutputsDigest() if outputs_digest is None else outputs_digest
    done = [s for s in steps if s.output is not None]
    state["outputs_digest"] = digested([s.output for s in done])
    state["output_digests"] = {str(s.ordinal): d for s, d in zip(done, digested.each, strict=True)}
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


@dataclass(frozen=True)
class CheckpointDifference:
    """One place where the rows disagree with the log: `field` is `status`, `current_step`,
    `steps.<ordinal>` or `ledger.<idempotency key>`; a value is None where that side has none
    (a ledger row the log records as failed, or never recorded)."""

    field: str
    rows: Any
    log: Any

    def __str__(self) -> str:
        return f"{self.field}: rows say {_said(self.rows)}, the log says {_said(self.log)}"


@dataclass(frozen=True)
class CheckpointComparison:
    """The latest snapshot (its seq) folded with the `events` after it, against the rows.

    `outputs` (fields `outputs.<ordinal>`, each side a digest) and `breaks` (of the task's hash
    chains) are filled by a full check (`restore.checkpoint_read`), not by the resume check."""

    task_id: int
    seq: int
    events: int
    folded: dict[str, Any]
    differences: tuple[CheckpointDifference, ...]
    outputs: tuple[CheckpointDifference, ...] = ()
    breaks: tuple[ChainBreak, ...] = ()

    @property
    def record_changed(self) -> bool:
        """Whether the record itself (an output, the log, a chain) was changed."""
        return bool(self.outputs or self.breaks)

    def __str__(self) -> str:
        return (
            f"task {self.task_id}: snapshot #{self.seq} + {self.events} events disagree with "
            f"the rows on {', '.join(sorted({d.field.split('.')[0] for d in self.differences}))}"
        )


def checkpoint_compare(
    task: Task, steps: list[Step], calls: list[ToolCall]
) -> CheckpointComparison:
    """Fold the latest snapshot with the events after it and compare the result with the rows.
    Raises CheckpointMismatch when the task has no snapshot."""
    found = prepared_rows(_latest_snapshot_and_folds(), [task.pk])
    if not found:
        raise CheckpointMismatch(f"task {task.pk} has no snapshot")
    seq, state, changes, events = found[0]
    expected = fold(json.loads(state), json.loads(changes) if changes is not None else [])
    actual = progress_state(task, steps, calls)
    differences: list[CheckpointDifference] = [
        CheckpointDifference(key, actual[key], expected[key])
        for key in ("status", "current_step")
        if expected[key] != actual[key]
    ]
    for group in ("steps", "ledger"):
        mine, logged = actual[group], expected[group]
        differences.extend(
            CheckpointDifference(f"{group}.{key}", mine.get(key), logged.get(key))
            for key in sorted(mine.keys() | logged.keys(), key=_ordinal_first)
            if mine.get(key) != logged.get(key)
        )
    return CheckpointComparison(task.pk, int(seq), int(events), expected, tuple(differences))


def checkpoint_verify(task: Task, steps: list[Step], calls: list[ToolCall]) -> int:
    """Fold the latest snapshot with the events after it; raise CheckpointMismatch if the rows
    disagree. Returns the snapshot's seq."""
    comparison = checkpoint_compare(task, steps, calls)
    if comparison.differences:
        raise CheckpointMismatch(str(comparison))
    return comparison.seq


def outputs_compare(task_id: int, steps: list[Step]) -> tuple[CheckpointDifference, ...]:
    """Each step output the task's latest snapshot recorded (`output_digests`) against the
    step's row now: a difference names the step (`outputs.<ordinal>`, digests on both sides).
    Outputs done after that snapshot are in no snapshot yet."""
    latest = Snapshot.objects.filter(task_id=task_id).order_by("-seq").first()
    recorded: dict[str, str] = latest.state.get("output_digests", {}) if latest else {}
    by_ordinal = {str(step.ordinal): step for step in steps}
    differences = []
    for ordinal in sorted(recorded, key=int):
        step = by_ordinal.get(ordinal)
        now = None if step is None or step.output is None else output_digest(step.output)
        if now != recorded[ordinal]:
            differences.append(CheckpointDifference(f"outputs.{ordinal}", now, recorded[ordinal]))
    return tuple(differences)


def _ordinal_first(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (-1, key)


def _said(value: Any) -> str:
    return "nothing" if value is None else str(value)


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
