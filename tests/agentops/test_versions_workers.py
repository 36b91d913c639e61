"""A registered agent re-declared mid-task, between two real worker processes: the first worker
(the old deploy) runs the task until it stops; a worker of the new deploy (its trip agent's prompt
changed) claims it after a person's retry and stops it with `agent_changed`; a second retry
accepts the new declaration and that worker finishes the task. Steps record who ran them.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create, task_retry
from agentops.engine.errors import FailureKind
from agentops.engine.registry import get_agent
from agentops.engine.versions import agent_version
from agentops.models import Task
from agentops.states import TaskStatus
from tests.agentops.redeclared_worker import EXTRA_PROMPT
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def settled(task_id: int, *statuses: str) -> Task:
    def check() -> Task | None:
        task = Task.objects.get(pk=task_id)
        return task if task.status in statuses else None

    return wait_for(check, timeout=60, message=f"task {task_id} to reach {statuses}")


def test_a_worker_of_a_new_deploy_stops_the_task_then_goes_on_under_the_new_agent(processes):
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    task = task_create(agent="trip", goal="Trip to Oslo", input={"traveller": "Ada"})
    old_worker = processes.worker()
    task = settled(task.pk, TaskStatus.NEEDS_ATTENTION)
    old_worker.kill()
    old_worker.wait(timeout=10)
    trip = get_agent("trip")
    old = agent_version(trip)
    new = agent_version(replace(trip, system_prompt=trip.system_prompt + EXTRA_PROMPT))
    log = open(processes.log_dir / "redeclared-worker.log", "wb")  # noqa: SIM115
    new_worker = subprocess.Popen(
        [sys.executable, "-m", "tests.agentops.redeclared_worker"],
        cwd=ROOT,
        env=processes.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    processes.children.append(new_worker)

    task_retry(task_id=task.pk, actor=None, reason="the hotel granted the scope")
    task = settled(task.pk, TaskStatus.NEEDS_ATTENTION)

    assert task.failure["kind"] == FailureKind.AGENT_CHANGED
    assert task.failure["detail"]["now"]["digest"] == new.digest
    assert task.failure["detail"]["changed"] == ["prompts"]

    task_retry(task_id=task.pk, actor=None, reason="accept the new prompt")
    task = settled(task.pk, TaskStatus.SUCCEEDED)

    assert task.agent_version["digest"] == new.digest
    rows = list(task.steps.order_by("ordinal").values_list("agent_version", "model_name"))
    assert rows == [(old.digest, "scripted")] * 2 + [(new.digest, "scripted")] * 2
    assert Effect.objects.filter(service="flights", operation="book").count() == 1
    assert Effect.objects.filter(service="hotels", operation="book").count() == 1
