"""The documentation's worked example runs as written, and the scenario command reports truly."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from agentops.dev.sim.models import Effect
from agentops.models import Task
from agentops.services import task_create
from agentops.states import TaskStatus
from tests.builders import run_until_parked_or_done
from tests.conftest import database_url

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def test_the_worked_example_in_docs_agents_md_runs(sim, redis_clean):
    text = (ROOT / "docs" / "agents.md").read_text()
    example = re.search(r"```python\n(# agentops/agents/shipping.py\n.*?)```", text, re.S)
    assert example, "docs/agents.md lost its worked example"
    exec(compile(example.group(1), "docs/agents.md", "exec"), {"__name__": "shipping_doc"})

    task = run_until_parked_or_done(
        task_create(agent="shipping_status", goal="Where is A1001?", input={"order_id": "A1001"})
    )

    assert task.status == TaskStatus.SUCCEEDED
    email = Effect.objects.get(service="email", operation="send")
    assert email.request["body"] == "Your parcel is delivered."


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
