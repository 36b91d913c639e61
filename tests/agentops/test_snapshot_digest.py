"""A run's snapshots digest the completed steps' outputs incrementally (`OutputsDigest`): the
digest is the one `digest` gives the whole list, however the list grew."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentops.dev.benchmarks.checkpoint import BENCH_POLICY, bench_policy_ensure
from agentops.engine import task_create
from agentops.engine.checkpoints import OutputsDigest
from agentops.engine.jsonvalues import digest
from agentops.engine.runner import task_advance
from agentops.models import Snapshot, Step
from agentops.states import StepStatus
from tests.agentops.test_jsonvalues import json_values


@given(st.lists(st.lists(json_values, max_size=4), max_size=5), st.integers(0, 3))
def test_the_incremental_digest_is_the_digest_of_the_list(growth: list[list[Any]], cut: int):
    outputs: list[Any] = []
    digested = OutputsDigest()
    for added in growth:
        outputs = outputs + added
        assert digested(outputs) == digest(outputs)
    # A list that does not extend the last one (shorter, or another object in it) starts over.
    shorter = outputs[: max(0, len(outputs) - cut)]
    assert digested(shorter) == digest(shorter)
    replaced = [{"other": 1}, *shorter[1:]]
    assert digested(replaced) == digest(replaced)
    assert digested([]) == digest([])


@pytest.mark.django_db(transaction=True)
def test_each_snapshot_of_a_run_digests_the_outputs_done_by_then():
    bench_policy_ensure()
    task = task_create(
        agent="bench_noop", goal="bench", input={"steps": 12, "payload_kb": 1}, policy=BENCH_POLICY
    )
    assert task_advance(task_id=task.pk, owner="test") == "succeeded"
    outputs = list(
        Step.objects.filter(task=task).order_by("ordinal").values_list("output", flat=True)
    )
    snapshots = list(Snapshot.objects.filter(task=task, seq__gt=0).order_by("seq"))
    assert len(snapshots) >= 2
    for snapshot in snapshots:
        done = sum(1 for s in snapshot.state["steps"].values() if s == StepStatus.SUCCEEDED)
        assert snapshot.state["outputs_digest"] == digest(outputs[:done])
