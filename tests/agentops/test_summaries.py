"""Model-written summaries of earlier work (`agentops.engine.summaries`): when a step's prompt
summarizes earlier steps by rule, the task's model writes a summary of the same steps beside it,
recorded with the step's model result (marked as the model's), counted in the task's tokens,
redacted before storage, shown escaped beside the rule-based one on the task page; a failed, slow
or unaffordable one never fails the task."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from agentops.models import Event, Step, Task
from agentops.states import TaskStatus
from tests.builders import refund, run_until_parked_or_done, signed_in
from tests.strict_openai import StrictServer, refund_brain, serve

# The refund's prompts outgrow half of an 800-token window at its last step: the first steps are
# summarized by rule there (measured: 2 of 4 in-process, 3 of 4 through the demo's processes).
SMALL_WINDOW = 800
SUMMARY_SYSTEM = "You summarize an AI agent's earlier work"


def summaries_of(task: Task) -> list[tuple[int, dict[str, Any]]]:
    """(step ordinal, summary record) of each model result that carries one, in order."""
    return [
        (ordinal, payload["summary"])
        for ordinal, payload in Event.objects.filter(
            task=task, action="agentops.step.model_result", payload__has_key="summary"
        )
        .order_by("seq")
        .values_list("step_ordinal", "payload")
    ]


def steps_tokens(task: Task) -> int:
    """The tokens the steps' own model responses report."""
    total = 0
    for step in Step.objects.filter(task=task):
        usage = (step.model_response or {}).get("usage") or {}
        total += int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    return total


@pytest.fixture
def small_window(settings) -> None:
    settings.AGENTOPS = {**settings.AGENTOPS, "CONTEXT_WINDOW_TOKENS": SMALL_WINDOW}


def summarized_at_start(task: Task) -> list[int]:
    return [
        payload["context"]["summarized_steps"]
        for payload in Event.objects.filter(task=task, action="agentops.step.started")
        .order_by("seq")
        .values_list("payload", flat=True)
    ]


@pytest.mark.django_db
def test_the_scripted_model_writes_a_summary_once_the_context_is_cut(
    sim, redis_clean, small_window
):
    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    cut = summarized_at_start(task)
    assert cut[:4] == [0, 0, 0, 0] and cut[4] > 0  # only the last step's prompt is cut
    ((ordinal, summary),) = summaries_of(task)
    assert ordinal == 4
    assert summary["written_by"] == "model"
    assert summary["status"] == "written"
    assert (summary["adapter"], summary["model"]) == ("scripted", "scripted")
    assert summary["steps"] == summary["through_step"] == cut[4]
    assert summary["text"].startswith(f"{cut[4]} earlier steps: Step 1 'Look up the order'")
    usage = summary["usage"]
    assert summary["tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    # Counted in the task's tokens, beside the steps' own.
    assert task.tokens_used == steps_tokens(task) + summary["tokens"]


@pytest.mark.django_db
def test_no_summary_while_the_context_is_whole(sim, redis_clean):
    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    assert set(summarized_at_start(task)) == {0}
    assert summaries_of(task) == []
    assert task.tokens_used == steps_tokens(task)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("faults", "why"),
    [
        (["5xx"], "unavailable: model server error (503)"),
        (["timeout"], "timeout: model call timed out"),
    ],
)
def test_a_failed_summary_is_recorded_and_never_fails_the_task(
    sim, redis_clean, small_window, faults, why
):
    task = run_until_parked_or_done(refund(summary_faults=faults))

    assert task.status == TaskStatus.SUCCEEDED
    ((_, summary),) = summaries_of(task)
    assert (summary["status"], summary["why"], summary["tokens"]) == ("failed", why, 0)
    assert "text" not in summary
    assert task.tokens_used == steps_tokens(task)


@pytest.mark.django_db
def test_a_summary_slower_than_its_deadline_gives_up_and_the_task_goes_on(
    sim, redis_clean, small_window, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "SUMMARY_TIMEOUT_SECONDS": 0.2}

    task = run_until_parked_or_done(refund(summary_seconds=30))

    assert task.status == TaskStatus.SUCCEEDED
    ((_, summary),) = summaries_of(task)
    assert summary["status"] == "failed"
    assert summary["why"] == "timeout: the summary took longer than its 0.2 s deadline"


@pytest.mark.django_db
def test_a_summary_the_token_budget_cannot_pay_for_is_skipped(
    sim, redis_clean, small_window, settings
):
    # A summary may take up to this many tokens: more than the task's budget leaves.
    settings.AGENTOPS = {**settings.AGENTOPS, "SUMMARY_MAX_TOKENS": 1_000_000}
    task = refund()
    Task.objects.filter(pk=task.pk).update(token_budget=500_000)

    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    ((_, summary),) = summaries_of(task)
    assert summary["status"] == "skipped"
    assert summary["why"].startswith("the task's token budget leaves ")
    assert task.tokens_used == steps_tokens(task)


@pytest.mark.django_db
def test_summaries_can_be_turned_off(sim, redis_clean, small_window, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "SUMMARY_EVERY_STEPS": 0}

    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    assert summaries_of(task) == []


# -- a real model: the official SDK against the strict server ------------------------------------


@pytest.fixture
def strict() -> Iterator[StrictServer]:
    state = StrictServer(brain=refund_brain)
    httpd, _ = serve(state)
    yield state
    httpd.shutdown()


def openai_settings(settings: Any, strict: StrictServer) -> None:
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "MODEL_ADAPTER": "openai",
        "OPENAI_BASE_URL": strict.url,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "strict-model",
    }


def summarizing(summary: dict[str, Any]) -> Any:
    """A brain that answers the summary request with `summary` and the steps as a competent
    model does."""

    def brain(body: dict[str, Any]) -> dict[str, Any]:
        if str(body["messages"][0]["content"]).startswith(SUMMARY_SYSTEM):
            return summary
        return refund_brain(body)

    return brain


HOSTILE = (
    "Looked up order A1001 <script>alert('x')</script> and checked it; the key "
    "sk-proj-AbCdEf0123456789AbCdEf0123456789AbCdEf01 was in the notes."
)


@pytest.mark.django_db
def test_a_real_models_summary_is_redacted_stored_and_shown_escaped_beside_the_rules(
    sim, redis_clean, small_window, settings, strict, client, django_user_model
):
    openai_settings(settings, strict)
    strict.brain = summarizing({"content": HOSTILE})

    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert strict.refused == []
    (request,) = [
        body
        for body in strict.received
        if str(body["messages"][0]["content"]).startswith(SUMMARY_SYSTEM)
    ]
    assert request["max_tokens"] == settings.AGENTOPS["SUMMARY_MAX_TOKENS"]
    assert "tools" not in request
    assert (
        "Step 1 'Look up the order' (lookup_order) succeeded" in request["messages"][1]["content"]
    )
    ((_, summary),) = summaries_of(task)
    assert (summary["adapter"], summary["model"], summary["status"]) == (
        "openai",
        "strict-model",
        "written",
    )
    assert "sk-proj-AbCdEf0123456789" not in json.dumps(summary)
    assert "<script>alert('x')</script>" in summary["text"]  # stored as the model wrote it
    assert task.tokens_used == steps_tokens(task) + summary["tokens"]

    reader = django_user_model.objects.create_superuser(username="root", password="pw-for-tests")
    page = signed_in(client, reader).get(reverse("agentops:task_detail", args=[task.pk]))
    html = page.content.decode()
    section = html[
        html.index('id="earlier-work"') : html.index("</section>", html.index('id="earlier-work"'))
    ]
    assert "By rule" in section and "Written by the model" in section
    assert "Step 1 &#x27;Look up the order&#x27; (lookup_order) succeeded" in section
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in section
    assert "<script>alert" not in html
    assert "strict-model" in section


@pytest.mark.django_db
def test_a_real_model_that_answers_an_error_leaves_the_rule_based_summary_alone(
    sim, redis_clean, small_window, settings, strict, client, django_user_model
):
    openai_settings(settings, strict)
    answered = threading.Event()

    def brain(body: dict[str, Any]) -> dict[str, Any]:
        if str(body["messages"][0]["content"]).startswith(SUMMARY_SYSTEM):
            answered.set()
            return {"content": ""}  # a model that writes nothing
        return refund_brain(body)

    strict.brain = brain

    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    assert answered.is_set()
    ((_, summary),) = summaries_of(task)
    assert (summary["status"], summary["why"]) == ("failed", "the model wrote no summary")
    assert summary["tokens"] > 0  # the provider counted the request: so does the task
    assert task.tokens_used == steps_tokens(task) + summary["tokens"]
    reader = django_user_model.objects.create_superuser(username="root", password="pw-for-tests")
    html = signed_in(client, reader).get(reverse("agentops:task_detail", args=[task.pk]))
    assert "the rule-based summary stands alone" in html.content.decode()


# -- the demo: real worker processes -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the scenario's own worker reads committed rows
def test_demo_scenario_model_summary_prints_the_task_status_and_the_summarys_tokens(
    sim_server, redis_clean, monkeypatch
):
    from tests.conftest import database_url

    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()

    call_command("demo_scenario", "model-summary", "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert report["task_status"] == TaskStatus.SUCCEEDED
    (summary,) = report["summaries"]
    assert summary["status"] == "written" and summary["written_by"] == "model"
    assert summary["step"] == 5
    assert report["summary_tokens"] == summary["tokens"] > 0
    task = Task.objects.get(pk=report["task_id"])
    assert report["tokens_used"] == task.tokens_used == steps_tokens(task) + summary["tokens"]
