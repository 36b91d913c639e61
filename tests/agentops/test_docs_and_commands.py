"""The scenario command reports truly (docs/agents.md's tutorial is checked by
test_agents_tutorial.py and run by test_example_agent.py)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from agentops.models import Task
from agentops.states import TaskStatus
from tests.conftest import database_url

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)  # the scenario's own worker reads committed rows
def test_demo_scenario_runs_end_to_end_with_real_processes(sim_server, redis_clean, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()

    call_command("demo_scenario", "trip-hotel-fails-rollback", "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert report["task_status"] == TaskStatus.ROLLED_BACK
    assert [s["status"] for s in report["steps"]] == ["succeeded", "succeeded", "failed", "pending"]
    assert report["steps"][2]["failure_kind"] == "authorization_gap"
    assert report["effects"] == {"flights.book": 1, "flights.cancel": 1}
    assert report["effects_per_key_max"] == 1
    assert Task.objects.get(pk=report["task_id"]).status == TaskStatus.ROLLED_BACK
