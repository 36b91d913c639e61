from __future__ import annotations

import pytest

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Task
from agentops.states import TaskStatus
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
