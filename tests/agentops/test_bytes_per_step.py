"""Bytes written per step stay flat as a task grows: the last step of a 200-step task writes
about what its first one did (docs/benchmarks.md, "Bytes").

The figures are the checkpoint benchmark's own: the WAL the real runner wrote for a real
200-step task (its snapshot chain included), read back through pg_walinspect, per snapshot
interval, full-page images left out (they follow the cluster's checkpoints, not the step).
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 200


# Not at Y: after the merge of one-commit reads (#26) one CI run measured 1.107 (4,755 -> 5,263
# bytes per step) and another passed; the cause of the spread is not known yet (issue #24, row 4).
@pytest.mark.xfail(reason="bytes per step measured 1.107 once after one-commit reads", strict=False)
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
    # tenth of the plan), so the first interval is steps 1-20 and the last steps 181-200.
    assert run["interval_steps"] == [20, 20]
    first, last = report["bytes_per_step_first"], report["bytes_per_step_last"]
    assert first > 2048  # each step carries its 2 KB payload
    assert last / first <= 1.10, (first, last)
