"""A short chaos run (about a minute) in the suite: worker kills and freezes, a Redis flush, model
and service faults, and every invariant checked from the database and the simulated services.
The long runs behind the figures in docs/recovery.md use the same command for 30 minutes."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]


def test_a_short_chaos_run_keeps_every_invariant(redis_clean, capsys):
    call_command("chaos", "--minutes", "1", "--workers", "2", "--tasks", "4", "--json")
    report = json.loads(capsys.readouterr().out)

    assert report["ok"], report
    assert report["settled"]
    assert report["kills"] >= 1 and report["redis_flushes"] == 1
    assert sum(report["faults"].values()) >= 5
    assert report["effects"] > 0
    assert report["duplicate_effects"] == 0
    assert report["logical_duplicate_effects"] == 0
    assert report["lost_tasks"] == 0
    assert report["steps_completed_twice"] == 0
    assert report["event_gaps"] == 0
