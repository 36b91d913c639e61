"""Agent handoff: triage hands its workflow state to refund, which starts from the recorded
progress under the same ledger and policy pin; the timeline shows the handoff."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db.models import Count
from django.urls import reverse

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Event, Task, ToolCall
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.builders import run_until_parked_or_done
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db


def triage() -> Task:
    return task_create(
        agent="triage",
        goal="Customer says order A1001 arrived damaged",
        input={"order_id": "A1001", "reason": "damaged"},
    )


def assert_handed_over_once(task: Task) -> None:
    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert task.agent == "refund"
    steps = list(task.steps.order_by("ordinal"))
    assert [(s.title, s.status) for s in steps] == [
        ("Look up the order", StepStatus.SUCCEEDED),
        ("Check refund eligibility", StepStatus.SUCCEEDED),
        ("Hand off to the refund agent", StepStatus.SUCCEEDED),
        ("Track the shipment", StepStatus.SUCCEEDED),
        ("Issue the refund", StepStatus.SUCCEEDED),
        ("Email the customer", StepStatus.SUCCEEDED),
    ]
    # The refund agent did not start from scratch: the order was looked up once, by triage.
    tools = Counter(
        ToolCall.objects.filter(task=task)
        .exclude(status=LedgerStatus.FAILED)
        .values_list("tool", flat=True)
    )
    assert tools == {
        "lookup_order": 1,
        "check_eligibility": 1,
        "track_shipment": 1,
        "issue_refund": 1,
        "email_customer": 1,
    }
    handed = Event.objects.filter(task=task, action="agentops.task.handed_off")
    assert handed.count() == 1
    payload = handed.get().payload
    assert payload["from"] == "triage" and payload["handed_off_to"] == "refund"
    assert [c["tool"] for c in payload["carried"]] == ["lookup_order", "check_eligibility"]
    assert payload["added"] == [3, 4, 5]
    # The refund depends on the carried eligibility check and the new tracking step.
    assert steps[4].depends_on == [1, 3]
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    per_key = Effect.objects.values("idempotency_key").annotate(n=Count("id"))
    assert max(row["n"] for row in per_key) == 1


def test_triage_hands_over_to_refund_which_starts_from_the_recorded_progress(sim, redis_clean):
    task = triage()
    pinned = task.policy_version_id

    task = run_until_parked_or_done(task)

    assert_handed_over_once(task)
    assert task.policy_version_id == pinned
    # Every refund step was routed under the pinned version, in the same ledger.
    routed = task.steps.exclude(policy_version_number=None)
    assert routed.count() == 5
    assert set(routed.values_list("policy_version_number", flat=True)) == {
        task.policy_version.number
    }
    keys = list(ToolCall.objects.filter(task=task).values_list("idempotency_key", flat=True))
    assert all(key.startswith(f"t{task.pk}-") for key in keys)


def test_the_timeline_shows_the_handoff(sim, redis_clean, client, django_user_model):
    from django.contrib.auth.models import Permission

    task = run_until_parked_or_done(triage())
    user = django_user_model.objects.create_user(username="olga", password="pw")
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="agentops", codename="view_task")
    )
    client.force_login(user)

    page = client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()

    assert "agentops.task.handed_off" in page
    assert "Hand off to the refund agent" in page


@pytest.mark.crash
@pytest.mark.django_db(transaction=True)
def test_worker_killed_right_after_the_handoff_does_not_hand_over_twice(processes):
    task = triage()
    victim = processes.worker(crash_at="after_handoff@2")
    assert victim.wait(timeout=60) == -9
    assert Task.objects.get(pk=task.pk).agent == "refund"
    processes.worker()
    processes.sweeper()

    wait_for(lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=60, message="the task")

    assert_handed_over_once(task)
