"""Budgets (time, tokens, cost), confidence collapse and the context budget, in-process."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import F
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agentops.engine import context, task_create
from agentops.engine.jsonvalues import canonical_json
from agentops.engine.leases import Heartbeat
from agentops.engine.promptcache import CACHE_BYTES, PromptCache
from agentops.engine.registry import get_agent
from agentops.engine.runner import TaskRun, http_client, task_advance
from agentops.engine.transitions import task_claim_row
from agentops.models import Event, Step, Task
from agentops.states import TaskStatus
from tests.builders import refund, run_until_parked_or_done
from tests.conftest import record_clock_moved

pytestmark = pytest.mark.django_db


def test_a_task_gets_the_default_wall_time_budget(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "TASK_WALL_TIME_SECONDS": 300}

    assert refund().wall_time_budget_seconds == 300
    explicit = task_create(agent="refund", goal="g", wall_time_budget_seconds=20, cost_budget=0.5)
    assert explicit.wall_time_budget_seconds == 20 and explicit.cost_budget == Decimal("0.5")


def test_running_past_the_time_budget_stops_the_task_with_mode_duration(sim, redis_clean, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "SLICE_SECONDS": 0.0}
    task = task_create(
        agent="refund", goal="Refund", input={"order_id": "A1001"}, wall_time_budget_seconds=60
    )
    task_advance(task_id=task.pk, owner="test")  # one step, then the slice is over
    # That first slice took 61 s.
    with record_clock_moved():
        Event.objects.filter(task=task, action="agentops.task.claimed").update(
            created_at=F("created_at") - timedelta(seconds=61)
        )

    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "budget_overflow" and task.failure["mode"] == "duration"
    assert task.failure["nature"] == "logic"
    assert "wall-time budget used up" in task.failure["message"]


def test_using_up_the_token_budget_stops_the_task_with_mode_budget(sim, redis_clean):
    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"}, token_budget=1)

    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["mode"] == "budget" and task.failure["detail"]["budget"] == "tokens"
    assert Step.objects.filter(task=task, status="succeeded").count() == 1


def test_the_cost_budget_is_checked_too(sim, redis_clean):
    task = task_create(
        agent="refund", goal="Refund", input={"order_id": "A1001"}, cost_budget="0.000001"
    )

    task = run_until_parked_or_done(task)

    assert task.failure["mode"] == "budget" and task.failure["detail"]["budget"] == "cost"


def test_budgets_can_be_set_in_the_start_form(django_user_model):
    user = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client = Client()
    client.force_login(user)

    response = client.post(
        reverse("agentops:task_new"),
        {
            "agent": "refund",
            "goal": "Refund A1001",
            "input": '{"order_id": "A1001"}',
            "token_budget": "5000",
            "cost_budget": "0.25",
            "wall_time_budget_seconds": "300",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    task = Task.objects.get()
    assert (task.token_budget, task.cost_budget, task.wall_time_budget_seconds) == (
        5000,
        Decimal("0.25"),
        300,
    )


def test_confidence_below_the_floor_for_n_steps_in_a_row_is_a_confidence_collapse(
    sim, redis_clean, settings
):
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "CONFIDENCE_FLOOR": 0.8,
        "CONFIDENCE_COLLAPSE_STEPS": 3,
    }
    # 0.75 is above the policy's gate baseline (0.7): each action alone runs.
    task = run_until_parked_or_done(refund(confidence=0.75))

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "low_confidence"
    assert task.failure["mode"] == "confidence" and task.failure["layer"] == "orchestration"
    assert task.failure["detail"]["steps"] == 3
    assert Step.objects.filter(task=task, status="succeeded").count() == 2


def test_a_single_low_confidence_action_goes_to_a_gate_not_a_collapse(sim, redis_clean):
    task = run_until_parked_or_done(refund(confidence=0.5))

    assert task.status == TaskStatus.AWAITING_APPROVAL
    assert task.failure is None


def test_the_context_stays_under_its_budget_by_summarizing_older_work_first(
    sim, redis_clean, settings
):
    task = run_until_parked_or_done(refund())
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    agent = get_agent("refund")
    roomy = context.build_context(agent=agent, task=task, steps=steps, current=steps[4])
    tight = context.build_context(
        agent=agent, task=task, steps=steps, current=steps[4], budget=roomy.tokens - 40
    )

    assert roomy.summarized == 0 and not roomy.over_budget
    assert tight.tokens <= tight.budget < roomy.tokens
    assert tight.summarized >= 1
    earlier = next(m for m in tight.messages if m["content"].startswith("Earlier work"))
    assert "Step 1 'Look up the order'" in earlier["content"]
    # The newest exchange is still whole: its tool message answers its call id.
    tools = [m for m in tight.messages if m["role"] == "tool"]
    assert tools and tools[-1]["tool_call_id"] == steps[3].model_response["tool_calls"][0]["id"]


def test_the_runner_records_the_estimate_and_keeps_prompts_under_a_small_window(
    sim, redis_clean, settings
):
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "CONTEXT_WINDOW_TOKENS": 800,
        "CONTEXT_BUDGET_FRACTION": 0.5,
    }

    task = run_until_parked_or_done(refund())

    assert task.status == TaskStatus.SUCCEEDED
    started = [
        e.payload["context"]
        for e in Event.objects.filter(task=task, action="agentops.step.started").order_by("seq")
    ]
    assert all(c["budget"] == 400 for c in started)
    assert all(c["tokens_estimate"] <= 400 or c["over_budget"] for c in started)
    assert started[-1]["summarized_steps"] >= 1


def test_the_estimate_is_calibrated_by_the_providers_reported_usage(sim, redis_clean, settings):
    task = run_until_parked_or_done(refund())
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    usage = steps[3].model_response["usage"]
    assert usage["prompt_estimate"] > 0 and usage["prompt_tokens"] > 0
    assert context.calibration(steps, before=steps[4]) == round(
        usage["prompt_tokens"] / usage["prompt_estimate"], 3
    )
    assert context.calibration(steps[:0]) == 1.0

    response = {
        **steps[3].model_response,
        "usage": {**usage, "prompt_tokens": usage["prompt_estimate"] * 2},
    }
    steps[3].model_response = response  # as if the provider had reported twice the estimate
    agent = get_agent("refund")
    plain = context.build_context(agent=agent, task=task, steps=steps, current=steps[4])
    doubled = context.build_context(
        agent=agent,
        task=task,
        steps=steps,
        current=steps[4],
        scale=context.calibration(steps, before=steps[4]),
    )
    assert doubled.scale == 2.0
    assert doubled.tokens == 2 * plain.tokens


def test_waiting_for_a_person_does_not_count_against_the_time_budget(
    sim, redis_clean, settings, django_user_model
):
    from reviews.services import gate_approve
    from tests.reviews.builders import open_gate
    from tests.reviews.conftest import ensure_groups

    groups = ensure_groups()
    operator = django_user_model.objects.create_user("op", password="pw")
    operator.groups.add(groups["operators"])
    task = run_until_parked_or_done(
        task_create(
            agent="refund",
            goal="Refund B2002",
            input={"order_id": "B2002"},
            wall_time_budget_seconds=60,
        )
    )
    assert task.status == TaskStatus.AWAITING_APPROVAL
    # Everything so far happened two hours ago: the task has waited at its gate since.
    with record_clock_moved():
        Event.objects.filter(task=task).update(created_at=F("created_at") - timedelta(hours=2))
    Task.objects.filter(pk=task.pk).update(started_at=timezone.now() - timedelta(hours=2))
    gate = open_gate(task)

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure


def test_worked_time_leaves_out_every_wait_outside_running():
    """Claimed for 10 s, parked 100 s at children, claimed again for 5 s: 15 s worked."""
    from agentops.engine.budgets import worked_seconds

    task = task_create(agent="refund", goal="Refund", input={"order_id": "A1001"})
    start = timezone.now() - timedelta(seconds=200)
    timeline = [
        ("agentops.task.claimed", 0),
        ("agentops.task.awaiting_children", 10),
        ("agentops.task.woken", 110),
        ("agentops.task.claimed", 110),
        ("agentops.task.succeeded", 115),
    ]
    for seq, (action, at) in enumerate(timeline, start=1):
        event = Event.objects.create(task=task, seq=100 + seq, action=action)
        with record_clock_moved():
            Event.objects.filter(pk=event.pk).update(created_at=start + timedelta(seconds=at))

    assert worked_seconds(task.pk) == pytest.approx(15.0)


def test_the_prompt_cache_keeps_at_most_its_bytes_dropping_the_least_recently_used():
    cache = PromptCache(max_bytes=1000)
    cache.put(("summary", 1), "a", 400)
    cache.put(("summary", 2), "b", 400)
    assert cache.get(("summary", 1)) == "a"  # now the most recently used

    cache.put(("summary", 3), "c", 400)
    cache.put(("summary", 4), "too heavy", 1001)

    assert cache.bytes == 800 and len(cache) == 2
    assert cache.get(("summary", 2)) is None
    assert cache.get(("summary", 4)) is None
    assert [cache.get(("summary", pk)) for pk in (1, 3)] == ["a", "c"]
    cache.put(("summary", 1), "a again", 100)
    assert cache.bytes == 500 and cache.peak_bytes == 800
    cache.clear()
    assert cache.bytes == 0 and len(cache) == 0


def bench_task_done(settings, *, steps: int, payload_kb: int) -> tuple[Task, list[Step]]:
    """A bench task run to its end in one slice, and its steps as recorded."""
    settings.AGENTOPS = {**settings.AGENTOPS, "SLICE_SECONDS": 3600.0}
    task = task_create(
        agent="bench_noop", goal="g", input={"steps": steps, "payload_kb": payload_kb}
    )
    assert task_advance(task_id=task.pk, owner="test") == "succeeded"
    task.refresh_from_db()
    return task, list(Step.objects.filter(task=task).order_by("ordinal"))


def test_a_cache_smaller_than_the_recent_exchanges_gives_the_same_prompts_within_its_bytes(
    settings, redis_clean
):
    task, steps = bench_task_done(settings, steps=12, payload_kb=4)
    agent = get_agent("bench_noop")
    # About two of the recent exchanges (each carries 4 KB of arguments and 4 KB of result).
    small = PromptCache(max_bytes=40_000)

    for step in steps:
        cached = context.build_context(
            agent=agent, task=task, steps=steps, current=step, cache=small
        )
        fresh = context.build_context(agent=agent, task=task, steps=steps, current=step)
        assert cached == fresh
        assert 0 < small.bytes <= 40_000

    assert small.peak_bytes <= 40_000
    # Evicted exchanges were made again: more than one per completed step sent whole.
    assert small.made["exchange"] > len(steps) - 1


def test_a_slice_makes_each_exchange_once_and_empties_its_cache_when_it_ends(settings, redis_clean):
    settings.AGENTOPS = {**settings.AGENTOPS, "SLICE_SECONDS": 3600.0}
    task = task_create(agent="bench_noop", goal="g", input={"steps": 30, "payload_kb": 1})
    claimed = task_claim_row(task_id=task.pk, owner="test")
    assert claimed is not None
    lease, row = claimed

    with Heartbeat(lease, armed=False) as beat:
        run = TaskRun(lease=lease, http=http_client(), beat=beat, task=row)
        assert run.advance() == "succeeded"

    # Steps 1..29 were completed before a later step's prompt: each exchange made once, each
    # summary line once, the goal once.
    assert run.prompts.made == {"exchange": 29, "summary": 24, "goal": 1}
    assert 0 < run.prompts.peak_bytes <= CACHE_BYTES
    assert len(run.prompts) == 0 and run.prompts.bytes == 0


def test_a_prompts_digest_and_estimate_are_those_of_the_messages_it_sends(settings, redis_clean):
    """The digest is `prompt_digest` of the messages sent (the sha256 of their canonical JSONs'
    sha256s), however much of it came from the cache, and the estimate is a quarter of the
    length of their canonical JSON; any change to a message changes the digest."""
    task, steps = bench_task_done(settings, steps=8, payload_kb=2)
    agent = get_agent("bench_noop")
    cache = PromptCache()

    digests = set()
    for step in steps:
        built = context.build_context(
            agent=agent, task=task, steps=steps, current=step, cache=cache
        )
        assert built.digest == context.prompt_digest(built.messages)
        assert built.estimate == len(canonical_json(built.messages)) // 4
        digests.add(built.digest)
        changed = [*built.messages[:-1], {**built.messages[-1], "content": "Now do nothing"}]
        assert context.prompt_digest(changed) != built.digest
        assert context.prompt_digest(built.messages[::-1]) != built.digest
    assert len(digests) == len(steps)
    assert cache.made["exchange"] == len(steps) - 1  # each exchange made once, then reused
