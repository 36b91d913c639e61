"""Which declaration of an agent and which model made each step (engine/versions.py), and the
rule when a task's agent is re-declared mid-task: the next claim stops it with `agent_changed`,
and a person's retry accepts the new declaration. In-process here, against the simulated
services; `test_versions_workers.py` changes the agent between two real worker processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from django.test import Client
from django.urls import reverse

from agentops.dev.sim.services import fault_set
from agentops.engine import task_create, task_retry
from agentops.engine.errors import FailureKind
from agentops.engine.registry import PlanStep, get_agent, register_agent
from agentops.engine.versions import agent_version, changed_parts, version_check
from agentops.models import Event, Step, Task
from agentops.selectors import task_get_recovery
from agentops.states import StepStatus, TaskStatus
from tests.builders import run_until_parked_or_done

pytestmark = pytest.mark.django_db


@pytest.fixture
def trip_restored() -> Iterator[None]:
    """Whatever a test registers as `trip`, the original is registered again afterwards."""
    original = get_agent("trip")
    yield
    register_agent(original)


def stopped_trip() -> Task:
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    task = task_create(agent="trip", goal="Trip to Lisbon", input={"traveller": "Ada"})
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def test_the_version_digests_plan_tools_and_prompt_and_names_what_changed(trip_restored):
    trip = get_agent("trip")
    before = agent_version(trip)

    assert agent_version(trip) == before  # stable
    assert agent_version(replace(trip, script=None)) == before  # the scripted model is not it
    prompt = agent_version(replace(trip, system_prompt=trip.system_prompt + " Be brief."))
    tools = agent_version(replace(trip, tools=trip.tools[:-1]))
    plan = agent_version(replace(trip, plan=[PlanStep("Search flights", "search_flights")]))

    assert changed_parts(before.as_pin(), prompt) == ["prompts"]
    assert changed_parts(before.as_pin(), tools) == ["tools"]
    assert changed_parts(before.as_pin(), plan) == ["plan"]
    assert len({before.digest, prompt.digest, tools.digest, plan.digest}) == 4
    assert version_check(before.as_pin(), trip)[1] is None
    assert version_check(None, trip)[1] is None  # a task from before versions: not checked


def test_each_step_records_the_agent_version_and_the_model(sim, redis_clean):
    task = run_until_parked_or_done(
        task_create(agent="trip", goal="Trip to Rome", input={"traveller": "Ada"})
    )

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    pinned = agent_version(get_agent("trip"))
    assert task.agent_version == pinned.as_pin()
    steps = list(task.steps.order_by("ordinal"))
    assert {(s.agent_version, s.model_name) for s in steps} == {(pinned.digest, "scripted")}


def test_an_agent_re_declared_mid_task_stops_it_and_a_retry_accepts_the_new_one(
    sim, redis_clean, trip_restored, django_user_model
):
    task = stopped_trip()
    old = agent_version(get_agent("trip"))
    trip = get_agent("trip")
    register_agent(replace(trip, system_prompt=trip.system_prompt + " Prefer aisle seats."))
    new = agent_version(get_agent("trip"))

    task_retry(task_id=task.pk, actor=None, reason="the hotel has granted the scope")
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.AGENT_CHANGED
    assert task.failure["detail"]["changed"] == ["prompts"]
    assert f"{old.short} -> {new.short}" in task.failure["message"]
    # No step ran under the new declaration: the hotel step is not started again.
    assert not Step.objects.filter(task=task, agent_version=new.digest).exists()
    assert task_get_recovery(task_id=task.pk).action == "retry"

    task_retry(task_id=task.pk, actor=None, reason="the new prompt is fine")
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert task.agent_version["digest"] == new.digest
    versions = list(task.steps.order_by("ordinal").values_list("agent_version", flat=True))
    assert versions == [old.digest, old.digest, new.digest, new.digest]
    accepted = Event.objects.get(task=task, action="agentops.task.agent_accepted")
    assert (accepted.payload["from"], accepted.payload["to"]) == (old.digest, new.digest)
    assert accepted.payload["changed"] == ["prompts"]
    # Completed steps ran once: one start each before the change.
    starts = Event.objects.filter(task=task, action="agentops.step.started")
    assert [starts.filter(step_ordinal=o).count() for o in range(4)] == [1, 1, 2, 1]

    admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()
    assert f"version {new.short}" in page
    assert page.count("agent changed</span>") == 1  # the hotel step, the first under the new one
    assert f">{old.short}</code>" in page and "scripted" in page


def test_a_step_that_never_started_records_no_version(sim, redis_clean):
    task = stopped_trip()

    last = Step.objects.get(task=task, ordinal=3)
    assert last.status == StepStatus.PENDING
    assert (last.agent_version, last.model_name) == ("", "")


def test_every_process_computes_the_same_version_of_every_agent():
    """A worker must see the version the web process pinned: a plan made by a function (with a
    comprehension, a set) is digested as data, not as reprs that hold addresses or follow the
    process's string hashing (`bench_noop` stopped as `agent_changed` in every worker)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    probe = (
        "import django; django.setup(); "
        "from agentops.engine.registry import agents; "
        "from agentops.engine.versions import agent_version; "
        "print(' '.join(f'{a.name}={agent_version(a).digest}' for a in agents() "
        "if not a.mcp_servers))"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DATABASE_URL": "postgres://lint@127.0.0.1/lint",  # named, never reached
        "REDIS_URL": "redis://127.0.0.1:6379/0",
    }
    seen = {
        subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env={**env, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    # Two processes with different string hashing (the test process has agents of other tests).
    (output,) = seen
    assert len(output.split()) >= 5
