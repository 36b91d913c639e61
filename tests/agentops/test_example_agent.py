"""The example agent package (tests/example_agent, the tutorial of docs/agents.md) is installed
into the test environment like any other package (a dependency group of pyproject.toml, in
uv.lock): a real worker finds its agent through the `agentops.agents` entry point and runs it end
to end against the simulated services, with nothing of it in this repository's code."""

from __future__ import annotations

import pytest

from agentops.dev.sim.models import Effect
from agentops.models import Step, Task, ToolCall
from agentops.services import task_create
from agentops.states import TaskStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_example_package_s_agent_runs_end_to_end_on_a_real_worker(processes):
    task = task_create(
        agent="parcel_notice",
        goal="Tell the customer of order A1001 where their parcel is",
        input={"order_id": "A1001"},
    )
    processes.worker()

    wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED,
        message="the example agent's task to succeed",
    )

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
