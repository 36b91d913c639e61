"""A tool's own retry policy and deadline: `max_attempts` caps the tries of its step (below the
task's cap), `backoff_base` replaces the global backoff, `timeout` is the deadline of each HTTP
request it makes. The refund agent declares them (`agentops/agents/refund.py`): `issue_refund`
gets two tries, `check_eligibility` a 3 s deadline and a 0.5 s backoff base.

The cap and the backoff run in-process against the simulated services (`sim`); the deadline
against the simulated services in their own process, over a socket, where it is the HTTP
client's read timeout and nothing else.
"""

from __future__ import annotations

import time

import pytest

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.engine.errors import FailureKind, ToolFailure
from agentops.engine.registry import get_tool, tool
from agentops.engine.retries import at_cap, attempt_cap, cap_failure, retry_delay
from agentops.engine.runner import task_advance
from agentops.models import Step, Task, ToolCall
from agentops.selectors import task_get_recovery
from agentops.states import LedgerStatus, TaskStatus
from tests.builders import refund, run_until_parked_or_done

GLOBAL_TIMEOUT = 10.0


def test_the_refund_agents_tools_declare_their_policy():
    assert get_tool("issue_refund").max_attempts == 2
    eligibility = get_tool("check_eligibility")
    assert (eligibility.timeout, eligibility.backoff_base) == (3.0, 0.5)
    assert eligibility.timeout_or(GLOBAL_TIMEOUT) == 3.0
    assert get_tool("track_shipment").timeout_or(GLOBAL_TIMEOUT) == GLOBAL_TIMEOUT


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"backoff_base": -1.0}, "backoff_base must be zero or more"),
        ({"timeout": 0.0}, "timeout must be more than zero"),
    ],
)
def test_a_tool_with_a_policy_out_of_range_is_refused_at_registration(arguments, message):
    with pytest.raises(ValueError, match=message):
        tool(side_effect="read", name="never_registered", **arguments)


@pytest.mark.django_db
def test_the_cap_is_the_lower_of_the_tasks_and_the_tools(sim, redis_clean):
    task = refund()
    step = Step.objects.get(task=task, ordinal=3)  # issue_refund
    assert attempt_cap(task, get_tool("issue_refund")) == 2
    assert attempt_cap(task, get_tool("track_shipment")) == task.step_retry_cap == 3
    task.step_retry_cap = 1
    assert attempt_cap(task, get_tool("issue_refund")) == 1
    task.step_retry_cap = 3
    step.attempts = 2
    assert at_cap(task, step)
    step.error = {"kind": "unavailable", "message": "payments.refund answered 503"}
    stop = cap_failure(task, step).as_failure()
    assert stop["message"].startswith(
        "step 4 was attempted 2 times (tool issue_refund's own cap 2)"
    )
    assert stop["detail"]["attempt_cap"] == 2
    step.attempts = 1
    assert not at_cap(task, step)
    failure = ToolFailure("payments.refund answered 503", kind=FailureKind.UNAVAILABLE)
    failure.retryable = True
    refund_tool = get_tool("issue_refund")
    assert retry_delay(failure, attempts=1, task=task, tool=refund_tool) is not None
    assert retry_delay(failure, attempts=2, task=task, tool=refund_tool) is None


@pytest.mark.django_db
def test_a_tools_own_cap_stops_its_step_before_the_tasks(sim, redis_clean):
    # 503 on every try: the task's cap is 3, the refund tool's own is 2.
    fault_set(service="payments", operation="refund", mode="5xx_before", count=5)

    task = run_until_parked_or_done(refund())

    assert task.step_retry_cap == 3
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.UNAVAILABLE
    assert task.failure["message"] == "payments.refund answered 503"  # the second try's
    tries = ToolCall.objects.filter(task=task, tool="issue_refund").order_by("id")
    assert [t.status for t in tries] == [LedgerStatus.FAILED, LedgerStatus.FAILED]
    assert len({t.idempotency_key for t in tries}) == 1
    assert Step.objects.get(task=task, ordinal=3).attempts == 2
    assert Effect.objects.filter(service="payments", operation="refund").count() == 0
    recovery = task_get_recovery(task_id=task.pk)
    assert recovery is not None and recovery.rule != "crash-resume"


@pytest.mark.django_db
def test_a_tool_without_its_own_cap_gets_the_tasks(sim, redis_clean):
    # The same two failures on the shipment lookup: its step has three tries and succeeds.
    fault_set(service="logistics", operation="track", mode="5xx_before", count=2)

    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert Step.objects.get(task=task, ordinal=2).attempts == 3
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1


@pytest.mark.django_db
def test_a_tools_own_backoff_base_replaces_the_setting(sim, redis_clean, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "BACKOFF_BASE_SECONDS": 30.0}
    fault_set(service="eligibility", operation="check", mode="5xx_before", count=1)
    fault_set(service="logistics", operation="track", mode="5xx_before", count=1)
    task = refund()

    task_advance(task_id=task.pk, owner="test")
    task.refresh_from_db()
    assert task.status == TaskStatus.RETRY_SCHEDULED
    # Attempt 1 of check_eligibility: its 0.5 s base, plus at most 25% jitter.
    assert 0.5 <= task.failure["retry_in_seconds"] <= 0.625
    task = run_until_parked_or_done(task, max_jobs=1)  # the check passes; the lookup fails
    assert task.status == TaskStatus.RETRY_SCHEDULED
    assert 30.0 <= task.failure["retry_in_seconds"] <= 37.5  # no policy: the setting's


@pytest.mark.django_db(transaction=True)
def test_a_tools_own_timeout_is_the_http_deadline(sim_server, redis_clean, settings):
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "SIM_BASE_URL": sim_server,
        "TOOL_TIMEOUT_SECONDS": GLOBAL_TIMEOUT,
        "BACKOFF_BASE_SECONDS": 0.0,
    }
    # The eligibility service answers after 6 s, once: past the tool's 3 s, within the 10 s
    # every other tool gets.
    fault_set(service="eligibility", operation="check", mode="slow", count=1, delay=6.0)
    task = refund()

    started = time.monotonic()
    task_advance(task_id=task.pk, owner="test")
    waited = time.monotonic() - started

    task.refresh_from_db()
    assert task.status == TaskStatus.RETRY_SCHEDULED, task.failure
    assert task.failure["kind"] == FailureKind.TIMEOUT
    assert task.failure["message"] == "eligibility.check timed out after 3 s"
    # Cut off at the tool's 3 s (the message says so), not at the 6 s answer: the step is to be
    # tried again. A loaded machine may add seconds to the wait, so only its floor is checked.
    assert waited >= 3.0
    check = ToolCall.objects.get(task=task, tool="check_eligibility")
    assert check.status == LedgerStatus.FAILED  # a read: tried again with the same key

    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert Task.objects.get(pk=task.pk).steps.get(ordinal=1).attempts == 2
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
