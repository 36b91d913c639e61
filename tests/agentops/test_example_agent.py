"""The example agent package (tests/example_agent, the tutorial of docs/agents.md) is installed
into the test environment like any other package (a dependency group of pyproject.toml, in
uv.lock): a real worker finds its agent through the `agentops.agents` entry point and runs it end
to end against the simulated services, with nothing of it in this repository's code; and a
worker killed after the email went out leaves the next one to find it with the package's probe,
as the tutorial says."""

from __future__ import annotations

import pytest

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import TaskStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
EMAIL_STEP = 1


def parcel_notice_task() -> Task:
    return task_create(
        agent="parcel_notice",
        goal="Tell the customer of order A1001 where their parcel is",
        input={"order_id": "A1001"},
    )


def succeeded(task: Task) -> bool:
    return Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED


def test_the_example_package_s_agent_runs_end_to_end_on_a_real_worker(processes):
    task = parcel_notice_task()
    processes.worker()

    wait_for(lambda: succeeded(task), message="the example agent's task to succeed")

    steps = Step.objects.filter(task=task).order_by("ordinal")
    assert [(s.title, s.status) for s in steps] == [
        ("Locate the parcel", "succeeded"),
        ("Email the customer", "succeeded"),
    ]
    calls = ToolCall.objects.filter(task=task).order_by("step__ordinal")
    assert [(c.tool, c.side_effect, c.status) for c in calls] == [
        ("locate_parcel", "read", "succeeded"),
        ("notify_customer", "notify", "succeeded"),
    ]
    assert Effect.objects.filter(service="logistics").count() == 0  # a read records no effect
    (email,) = Effect.objects.filter(service="email", operation="send")
    assert email.idempotency_key == calls[1].idempotency_key
    carrier = calls[0].result["carrier"]
    assert email.request["body"] == f"Your parcel is delivered, carried by {carrier}."


@pytest.mark.crash
def test_a_worker_killed_after_the_example_s_email_leaves_the_next_to_find_it_by_probe(processes):
    task = parcel_notice_task()
    victim = processes.worker(crash_at=f"after_tool_call@{EMAIL_STEP}")
    assert victim.wait(timeout=60) == -9, "the worker should have been killed after the email"
    assert Effect.objects.filter(service="email", operation="send").count() == 1

    processes.worker()
    processes.sweeper()
    wait_for(lambda: succeeded(task), timeout=60, message="the task to succeed after the takeover")

    email = ToolCall.objects.get(task=task, tool="notify_customer")
    assert email.status == "succeeded"
    assert Effect.objects.filter(service="email", operation="send").count() == 1
    (recorded,) = Event.objects.filter(
        task=task, step_ordinal=EMAIL_STEP, action="agentops.ledger.succeeded"
    )
    assert recorded.payload["how"] == "probe found the effect"
