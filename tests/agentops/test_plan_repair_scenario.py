"""`manage.py demo_scenario plan-repair`: real processes (the simulated services, a worker, the
sweeper) run a trip whose hotel is fully booked; the plan is repaired twice (the hotel step's
instruction, a new step) and retried; the worker follows the repaired plan and nothing done before
the repair runs again (counted on the simulated services and in the event log)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from tests.conftest import database_url


@pytest.mark.django_db(transaction=True)  # the scenario's own worker reads committed rows
def test_demo_scenario_plan_repair_follows_the_repaired_plan_and_repeats_nothing(
    sim_server, redis_clean, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()

    call_command("demo_scenario", "plan-repair", "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert report["task_status"] == "succeeded"
    assert report["recommended_before_repair"] == "repair"
    assert report["repairs"] == 2
    assert [s["title"] for s in report["steps"]] == [
        "Search flights",
        "Book the flight",
        "Book the hotel",
        "Send the itinerary",
        "Copy the itinerary to the office",
    ]
    assert [s["attempts"] for s in report["steps"]] == [1, 1, 1, 1, 1]
    assert report["completed_before_repair"] == [1, 2]
    assert report["completed_steps_rerun"] == 0
    assert report["effects_before_repair"] == {"flights.book": 1}
    assert report["effects"] == {"email.send": 2, "flights.book": 1, "hotels.book": 1}
    assert report["effects_repeated"] == 0
    assert report["effects_per_key_max"] == 1
