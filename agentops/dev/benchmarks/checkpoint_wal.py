"""The checkpoint benchmark's bytes: what one task run wrote to the WAL, split by snapshot.

The WAL ties a transaction to a step number only through the snapshot inserts, so bytes are taken
per snapshot interval (docs/benchmarks.md, "Bytes"), without full-page images:

- `bytes_per_step_first` / `_last`: everything in the first / last interval over its steps. The
  last one carries a snapshot of every step's status (a few bytes per step done, by design), so
  it is higher than the first by about nine times one step's share of a snapshot.
- `step_bytes_per_step_first` / `_last`: the steps' own bytes (the snapshot table, its indexes and
  its TOAST left out), over the first and the second half of the run (split at the middle
  snapshot): what grows here grows with every step, and would make a long task quadratic.
- `snapshot_bytes_per_done_step`: the first and the last snapshot's state as stored (compressed)
  over the steps done when each was taken: flat when a snapshot grows linearly with the task, not
  with its payloads.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import psycopg
from django.db.models import F, Func, IntegerField

from agentops.dev.benchmarks.checkpoint_report import Pair
from agentops.dev.benchmarks.wal import WalReader, WalWindow
from agentops.models import Snapshot
from agentops.states import StepStatus


def wal_figures(wal: WalReader, pair: Pair, steps: int) -> dict[str, Any]:
    assert pair.task_wal is not None and pair.floor_wal is not None
    try:
        floor = wal.window(*pair.floor_wal)
        run = wal.window(*pair.task_wal)
    except psycopg.Error as exc:
        return {"interval_note": f"WAL not readable ({exc.diag.message_primary})"}
    commits = sorted(run.commits(), key=lambda r: r.start)
    snapshot = wal.table_relations(Snapshot._meta.db_table)
    # A snapshot's commit is a transaction that inserted a snapshot row: a read of the table
    # can write too (a hint bit's full-page image, with data checksums on, after a checkpoint
    # that another database's work brought on), and is no boundary.
    snapshot_xids = {
        r.xid
        for r in run.touching(snapshot).records
        if r.resource_manager in ("Heap", "Heap2") and "INSERT" in r.record_type
    }
    boundaries = [c.end for c in commits if c.xid in snapshot_xids]
    done = [
        sum(1 for status in state["steps"].values() if status == StepStatus.SUCCEEDED)
        for state in Snapshot.objects.filter(task_id=pair.task_id, seq__gt=0)
        .order_by("seq")
        .values_list("state", flat=True)
    ]
    figures: dict[str, Any] = {
        "wal_bytes_per_step": run.bytes / steps,
        "wal_fpi_bytes_per_step": run.fpi_bytes / steps,
        "wal_commits": len(commits),
        "floor_bytes_per_step": floor.record_bytes / pair.floor_rows,
        "floor_commits": len(floor.commits()),
    }
    if len(boundaries) != len(done) or len(commits) < 2 or not done:
        figures["interval_note"] = (
            f"{len(boundaries)} snapshot commits in the WAL, {len(done)} snapshots in the "
            "table: intervals not measured"
        )
        return figures
    # The claim and the first step's start are per-claim costs: the first interval begins
    # after them, so that it holds the same kinds of commits as the last one.
    starts = [commits[1].end, *boundaries[:-1]]
    counts = [done[0], *(b - a for a, b in pairwise(done))]
    intervals = [run.between(a, b) for a, b in zip(starts, boundaries, strict=True)]
    first, last = intervals[0], intervals[-1]
    middle = max(len(intervals) // 2, 1)
    halves = [
        _joined(intervals[:middle]).without(snapshot),
        _joined(intervals[middle:] or intervals[:middle]).without(snapshot),
    ]
    half_steps = [sum(counts[:middle]), sum(counts[middle:] or counts[:middle])]
    snapshots = _stored_snapshot_bytes(pair.task_id)
    figures.update(
        {
            "bytes_per_step_first": first.record_bytes / counts[0],
            "bytes_per_step_last": last.record_bytes / counts[-1],
            "fpi_bytes_per_step_first": first.fpi_bytes / counts[0],
            "fpi_bytes_per_step_last": last.fpi_bytes / counts[-1],
            "interval_steps": [counts[0], counts[-1]],
            "step_bytes_per_step_first": halves[0].record_bytes / half_steps[0],
            "step_bytes_per_step_last": halves[1].record_bytes / half_steps[1],
            "half_steps": half_steps,
            "snapshot_bytes": snapshots,
            "snapshot_bytes_per_done_step": [snapshots[0] / done[0], snapshots[1] / done[-1]],
        }
    )
    return figures


def _stored_snapshot_bytes(task_id: int) -> list[int]:
    """The first and the last snapshot's state as stored (`pg_column_size`: compressed, TOAST
    included). Not read from the WAL: the first change of a page after a checkpoint is logged as
    a full-page image instead of the row, so the same snapshot's record bytes there depend on
    when the server's checkpoints fell (seen once in CI: 160 bytes for 20 steps' statuses)."""
    sizes = list(
        Snapshot.objects.filter(task_id=task_id, seq__gt=0)
        .order_by("seq")
        .annotate(stored=Func(F("state"), function="pg_column_size", output_field=IntegerField()))
        .values_list("stored", flat=True)
    )
    return [int(sizes[0]), int(sizes[-1])]


def _joined(windows: list[WalWindow]) -> WalWindow:
    return WalWindow([r for window in windows for r in window.records])
