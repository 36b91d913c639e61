from __future__ import annotations

import pytest

from agentops.dev.sim.models import Effect
from agentops.dev.sim.world import order
from agentops.engine import is_pointer, task_create
from agentops.engine.excerpts import result_json
from agentops.models import Event, Step, Task
from agentops.states import TERMINAL, TaskStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_refund_task_completes_on_a_real_worker(processes):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    processes.worker()

    done = wait_for(
        lambda: Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED,
        message="the task to succeed",
    )

    assert done
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    assert Effect.objects.filter(service="email", operation="send").count() == 1


def test_a_refund_whose_results_are_all_artifacts_refunds_the_orders_amount(processes):
    # The worker stores every result, proposal and response above 64 bytes as an artifact: the
    # model must still read the order's amount from the lookup, not the artifact's pointer.
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    processes.worker(extra_env={"AGENTOPS_ARTIFACT_THRESHOLD_BYTES": "64"})

    def ended_or_stopped() -> str | None:
        status = Task.objects.get(pk=task.pk).status
        return status if status in {*TERMINAL, TaskStatus.NEEDS_ATTENTION} else None

    status = wait_for(ended_or_stopped, message="the task to end or stop")

    assert status == TaskStatus.SUCCEEDED
    lookup = Step.objects.get(task=task, ordinal=0)
    assert is_pointer(lookup.output)  # the threshold did offload the order's lookup
    # The refund's prompt gave the lookup in full, and its start says so.
    started = Event.objects.get(task=task, action="agentops.step.started", step_ordinal=3)
    assert {
        "step": 1,
        "given": "full",
        "bytes": len(result_json(order("A1001"))),
        "artifact": lookup.output["$artifact"],
    } in started.payload["context"]["results"]
    refunds = Effect.objects.filter(service="payments", operation="refund")
    assert [effect.request["amount"] for effect in refunds] == [order("A1001")["amount"]]
    emails = Effect.objects.filter(service="email", operation="send")
    assert [effect.request["to"] for effect in emails] == [order("A1001")["customer_email"]]
