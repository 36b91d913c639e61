"""A refund task end to end through the official SDK against the strict server, with real RQ
worker processes, also after a SIGKILL in the middle of the task."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from django.db.models import Count
from django.test import Client
from django.urls import reverse

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.agentops.test_crash import model_calls
from tests.conftest import wait_for
from tests.strict_openai import StrictServer, refund_brain, serve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]


@pytest.fixture
def strict() -> Iterator[StrictServer]:
    state = StrictServer(brain=refund_brain)
    httpd, _ = serve(state)
    yield state
    httpd.shutdown()


def model_env(strict: StrictServer) -> dict[str, str]:
    return {
        "AGENTOPS_MODEL_ADAPTER": "openai",
        "OPENAI_BASE_URL": strict.url,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "strict-model",
    }


def step_of(body: dict) -> int:
    last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    return int(re.search(r"Now do step (\d+) of", last).group(1)) - 1


def recorded_ids(task: Task) -> list[str]:
    return [
        s.model_response["tool_calls"][0]["id"]
        for s in Step.objects.filter(task=task).order_by("ordinal")
        if s.model_response is not None
    ]


def assert_done_once(task: Task, strict: StrictServer) -> None:
    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert [s.status for s in task.steps.order_by("ordinal")] == [StepStatus.SUCCEEDED] * 5
    assert strict.refused == []
    assert sorted(step_of(body) for body in strict.received) == [0, 1, 2, 3, 4]
    live = ToolCall.objects.filter(task=task).exclude(status=LedgerStatus.FAILED)
    assert set(live.values_list("status", flat=True)) == {LedgerStatus.SUCCEEDED}
    per_key = Effect.objects.values("idempotency_key").annotate(n=Count("id"))
    assert max(row["n"] for row in per_key) == 1
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    assert Effect.objects.filter(service="email", operation="send").count() == 1
    # Every request answered the calls recorded before it, by the ids recorded with them.
    ids = recorded_ids(task)
    for body in strict.received:
        answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert answered == ids[: step_of(body)]


def test_a_refund_runs_to_completion_through_the_strict_server(processes, strict):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    processes.worker(extra_env=model_env(strict))

    wait_for(lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=60, message="the task")

    assert_done_once(task, strict)
    refund_args = ToolCall.objects.get(task=task, tool="issue_refund").args
    assert refund_args["amount"] > 0  # read back from the lookup's tool message
    # The server counts tokens differently from the estimate: later prompts are calibrated.
    steps = list(task.steps.order_by("ordinal"))
    started = Event.objects.filter(task=task, action="agentops.step.started", step_ordinal=4).get()
    usage = steps[3].model_response["usage"]
    assert started.payload["context"]["scale"] == round(
        usage["prompt_tokens"] / usage["prompt_estimate"], 3
    )
    assert started.payload["context"]["scale"] != 1.0
    task.refresh_from_db()
    assert task.tokens_used == sum(
        s.model_response["usage"]["prompt_tokens"] + s.model_response["usage"]["completion_tokens"]
        for s in task.steps.all()
    )


def test_a_refund_resumes_after_a_sigkill_mid_task_with_the_same_call_ids(
    processes, strict, django_user_model
):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    victim = processes.worker(crash_at="after_model_result@3", extra_env=model_env(strict))
    assert victim.wait(timeout=60) == -9
    before = recorded_ids(Task.objects.get(pk=task.pk))[:4]
    requests_before = len(strict.received)
    processes.worker(extra_env=model_env(strict))
    processes.sweeper()

    wait_for(lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=60, message="the task")

    assert_done_once(task, strict)
    assert requests_before == 4 and len(strict.received) == 5  # step 4 was not asked again
    assert model_calls(processes) == {i: 1 for i in range(5)}
    assert recorded_ids(task)[:4] == before
    # The context rebuilt after the crash: the resume note, the goal, the four earlier exchanges
    # with the ids recorded before the kill, then the current step.
    resumed = strict.received[-1]["messages"]
    assert [m["role"] for m in resumed] == [
        "system",
        "system",
        "user",
        *["assistant", "tool"] * 4,
        "user",
    ]
    assert "resumed from a checkpoint" in resumed[1]["content"]
    assert [m["tool_call_id"] for m in resumed if m["role"] == "tool"] == before
    assert json.loads(resumed[4]["content"])["amount"] > 0  # the lookup result, verbatim
    task.refresh_from_db()
    assert task.recoveries == 1
    spent = sum(
        s.model_response["usage"]["prompt_tokens"] + s.model_response["usage"]["completion_tokens"]
        for s in task.steps.order_by("ordinal")[:4]
    )
    assert task.tokens_saved == spent > 0
    admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()
    assert f'<dd id="tokens-saved">{spent} ' in page


def test_an_agent_names_its_own_adapter_and_model(sim_server, redis_clean, strict, settings):
    from agentops.engine.registry import Agent, get_agent, register_agent
    from tests.builders import run_until_parked_or_done

    refund = get_agent("refund")
    register_agent(
        Agent(
            name="refund-real-model",
            system_prompt=refund.system_prompt,
            tools=refund.tools,
            plan=refund.plan,
            adapter="openai",
            model="agent-model",
            hidden=True,
        )
    )
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "MODEL_ADAPTER": "scripted",  # the default stays the scripted model
        "OPENAI_BASE_URL": strict.url,
        "OPENAI_MODEL": "default-model",
    }

    task = run_until_parked_or_done(
        task_create(agent="refund-real-model", goal="Refund A1001", input={"order_id": "A1001"})
    )

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert {body["model"] for body in strict.received} == {"agent-model"}
    assert len(strict.received) == 5 and strict.refused == []


def test_a_context_length_refusal_is_retried_with_a_shorter_context(
    sim_server, redis_clean, strict, settings
):
    from tests.builders import run_until_parked_or_done

    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "MODEL_ADAPTER": "openai",
        "OPENAI_BASE_URL": strict.url,
        "BACKOFF_BASE_SECONDS": 0.01,
    }
    body = {
        "error": {
            "message": "This model's maximum context length is 10 tokens.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    strict.faults.append((400, {"Content-Type": "application/json"}, json.dumps(body)))

    task = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund A1001", input={"order_id": "A1001"})
    )

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    failed = Event.objects.get(task=task, action="agentops.step.failed")
    assert failed.payload["failure"]["kind"] == "context_overflow"
    assert failed.payload["failure"]["mode"] == "context"
    assert failed.payload["failure"]["nature"] == "logic"
    starts = Event.objects.filter(task=task, action="agentops.step.started", step_ordinal=0)
    budgets = [e.payload["context"]["budget"] for e in starts.order_by("seq")]
    assert budgets[1] == budgets[0] // 2


def test_model_output_the_database_cannot_store_is_output_invalid_not_a_crash(
    sim_server, redis_clean, strict, settings
):
    from tests.builders import run_until_parked_or_done

    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "MODEL_ADAPTER": "openai",
        "OPENAI_BASE_URL": strict.url,
        "BACKOFF_BASE_SECONDS": 0.01,
    }
    strict.brain = lambda body: {"content": "I refuse\u0000"}

    task = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund A1001", input={"order_id": "A1001"})
    )

    assert task.status == TaskStatus.NEEDS_ATTENTION
    step = task.steps.get(ordinal=0)
    assert step.error["kind"] == "output_invalid"
    assert "reply.text: contains a NUL character" in step.error["message"]
    assert step.model_response is None
