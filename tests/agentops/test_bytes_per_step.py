"""Bytes written per step stay flat as a task grows (docs/benchmarks.md, "Bytes").

The figures are the checkpoint benchmark's own: the WAL the real runner wrote for a real
200-step task (its snapshot chain included), read back through pg_walinspect, full-page images
left out (they follow the cluster's checkpoints, not the step).

Two terms, asserted apart:
- A step's own bytes (its commit, without the snapshot table): steps 101-200 write within 5% of
  what steps 1-100 wrote per step. A value that grew by even 3 bytes with each step done (a list
  re-stored per step, a growing event payload) would show as 300 bytes per step between the
  halves, over 6%: a long task would cost quadratic storage.
- The snapshots: each records every step's status (a few bytes per step done, never the payloads)
  and one is taken every tenth of the plan, so at most ten per task. The last snapshot's bytes per
  step done stay at or below the first one's: a snapshot grows linearly with the task.
Their sum per 20-step interval (`bytes_per_step_last / _first`) is not flat by design: the last
interval carries a snapshot of 200 steps, the first one of 20 (about +380 bytes per step).
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agentops.dev.benchmarks.tasks import raw_postgres
from agentops.dev.benchmarks.wal import WalReader

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 200


def test_bytes_per_step_stay_flat_over_200_steps(redis_clean):
    out = StringIO()
    call_command(
        "bench",
        "checkpoint",
        *("--steps", str(STEPS), "--payload-kb", "2", "--repeat", "1", "--json"),
        stdout=out,
    )
    report = json.loads(out.getvalue())

    run = report["runs"][0]
    # A real chain: at 200 steps a snapshot every 20 completed steps (SNAPSHOT_EVERY, at least a
    # tenth of the plan), so the first interval is steps 1-20 and the last steps 181-200; the
    # halves are steps 1-100 and 101-200.
    assert run["interval_steps"] == [20, 20]
    assert run["half_steps"] == [100, 100]
    first, last = report["step_bytes_per_step_first"], report["step_bytes_per_step_last"]
    assert first > 2048  # each step carries its 2 KB payload
    assert last / first <= 1.05, (first, last)
    # A snapshot is a few bytes per step done, not a step's payload, and grows linearly.
    at_first, at_last = run["snapshot_bytes_per_done_step"]
    assert at_last <= 128, run["snapshot_bytes"]
    assert at_last <= at_first, run["snapshot_bytes"]


@pytest.mark.django_db  # rolled back: it writes on a connection of its own
def test_a_window_holds_what_this_databases_sessions_wrote_not_an_analyze_or_a_vacuum():
    """An auto-analyze that falls in a run rewrites the statistics of the tables it analyzes:
    hundreds of KB, counted once as 1,300 bytes more per step in one half of a CI run."""
    with raw_postgres() as raw:
        wal, note = WalReader.open(raw)
        assert wal is not None, note
        raw.execute("CREATE TABLE wal_probe (id int PRIMARY KEY, note text)")
        try:
            start = wal.lsn()
            raw.execute(
                "INSERT INTO wal_probe SELECT n, repeat('x', 100) FROM generate_series(1, 50) n"
            )
            raw.execute("DELETE FROM wal_probe WHERE id <= 25")
            raw.execute("ANALYZE wal_probe, agentops_event, agentops_step, agentops_task")
            raw.execute("VACUUM wal_probe")
            window = wal.window(start, wal.lsn(flushed=True))
        finally:
            raw.execute("DROP TABLE wal_probe")
    ours = {r.xid for r in window.records}
    assert len(ours) == 2, window.records  # the INSERT's and the DELETE's transactions
    assert len(window.commits()) == 2
    assert {r.resource_manager for r in window.records} == {"Heap", "Btree", "Transaction"}
    heap = [r.record_type.split()[0] for r in window.records if r.resource_manager == "Heap"]
    assert heap.count("DELETE") == 25
    assert len([kind for kind in heap if kind.startswith("INSERT")]) == 50
