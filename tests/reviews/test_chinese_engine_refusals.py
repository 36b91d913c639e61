# ruff: noqa: RUF001 - the expected texts are Chinese, with its full-width punctuation.
"""The engine's refusals read in the reader's language, with the same status and code: a person
who retries a task that is no longer stopped (the recovery panel), asks for an option the advisor
does not offer, or repairs the plan of a task that is not stopped (the API, Accept-Language
zh-Hans) reads why in Chinese; in English the words are the ones they were. The exception's
English (`str(exc)`: logs, a stored failure) does not follow the request's language."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from agentops.engine import TransitionRefused, task_control
from agentops.engine.advisor.rules import RULES
from agentops.models import Task
from agentops.states import TaskStatus
from agentops.tokens import api_token_create
from policies.phrases import Phrase
from reviews.models import Decision
from tests.reviews.builders import client_for, stopped_trip, unknown_refund

pytestmark = pytest.mark.django_db

HAN = re.compile(r"[\u4e00-\u9fff]")


def intervene(client: Any, task_id: int, action: str, language: str) -> Any:
    return client.post(
        reverse("reviews:intervention", args=[task_id]),
        {"action": action, "reason": "", "confirmed": "True"},
        HTTP_ACCEPT_LANGUAGE=language,
    )


def alert_of(response: Any) -> str:
    """The panel's alert as a person reads it (tags dropped, spaces folded)."""
    page = response.content.decode()
    found = re.search(r'role="alert"[^>]*>(.*?)</', page, re.S)
    assert found, page[:2000]
    return " ".join(re.sub(r"<[^>]*>", " ", found.group(1)).split())


def test_retrying_a_task_no_longer_stopped_answers_409_in_the_readers_language(
    sim, redis_clean, operator, operator2, starter
):
    task = stopped_trip(created_by=starter)
    assert intervene(client_for(operator), task.pk, "abort", "en").status_code == 302

    zh = intervene(client_for(operator2), task.pk, "retry", "zh-Hans")
    en = intervene(client_for(operator2), task.pk, "retry", "en")

    assert (zh.status_code, en.status_code) == (409, 409)
    assert f"任务 {task.pk} 当前为 aborted；没有需要恢复的内容" in alert_of(zh)
    assert f"task {task.pk} is aborted; there is nothing to recover" in alert_of(en)
    assert not HAN.search(alert_of(en))
    assert Decision.objects.count() == 1
    task.refresh_from_db()
    assert task.status == TaskStatus.ABORTED


def test_an_option_the_advisor_does_not_offer_is_refused_in_the_readers_language(
    sim, redis_clean, operator, starter, settings
):
    task = unknown_refund(settings, created_by=starter)

    zh = intervene(client_for(operator), task.pk, "retry", "zh-Hans")
    en = intervene(client_for(operator), task.pk, "retry", "en")

    assert (zh.status_code, en.status_code) == (400, 400)
    assert "retry 目前不是此任务的可选操作；请从 confirm, abort 中选择" in alert_of(zh)
    assert "retry is not an option for this task now; choose one of confirm, abort" in alert_of(en)
    assert not Decision.objects.exists()


def test_the_apis_detail_of_an_engine_refusal_follows_accept_language(
    sim, redis_clean, operator, operator2, starter
):
    task = stopped_trip(created_by=starter)
    assert intervene(client_for(operator), task.pk, "abort", "en").status_code == 302
    _, token = api_token_create(user=operator2, name="zh")
    path = f"/api/v1/tasks/{task.pk}/plan-repair"
    asks = [
        # A task that is not stopped: 409 (a refused transition); an unknown change: 400.
        (
            {"op": "instruct", "step": 1, "instruction": "go", "reason": "a second try"},
            409,
            f"任务 {task.pk} 当前为 aborted；其计划未修复",
            f"task {task.pk} is aborted; its plan is not repaired",
        ),
        (
            {"op": "paint", "preview": True},
            400,
            f"任务 {task.pk} 当前为 aborted：只能修复已停止任务的计划",
            f"task {task.pk} is aborted: only a stopped task's plan is repaired",
        ),
    ]
    for body, status, chinese, english in asks:
        answers = {
            language: Client().post(
                path,
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
                HTTP_ACCEPT_LANGUAGE=language,
            )
            for language in ("zh-Hans", "en")
        }
        zh, en = answers["zh-Hans"], answers["en"]
        assert (zh.status_code, en.status_code) == (status, status), (body, en.json())
        assert sorted(zh.json()) == sorted(en.json()) == ["detail"]
        assert zh.json()["detail"] == chinese
        assert en.json()["detail"] == english
    assert Decision.objects.count() == 1


def test_starting_an_unknown_agent_is_refused_in_the_readers_language(operator, starter):
    _, token = api_token_create(user=starter, name="zh")
    answers = {
        language: Client().post(
            "/api/v1/tasks",
            {"agent": "no_such_agent", "goal": "g", "input": {}},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
            HTTP_ACCEPT_LANGUAGE=language,
        )
        for language in ("zh-Hans", "en")
    }
    zh, en = answers["zh-Hans"], answers["en"]
    assert (zh.status_code, en.status_code) == (400, 400)
    assert zh.json()["detail"].startswith("未知智能体 'no_such_agent'；已注册的智能体：")
    assert en.json()["detail"].startswith("unknown agent 'no_such_agent'; registered agents: ")
    assert not Task.objects.exists()


def test_the_exceptions_english_does_not_follow_the_request(sim, redis_clean, operator, starter):
    task = stopped_trip(created_by=starter)
    with translation.override("zh-hans"), pytest.raises(TransitionRefused) as refused:
        task_control(task_id=task.pk, action="resume", actor=operator)

    assert str(refused.value) == f"task {task.pk} is needs_attention, not paused"
    with translation.override("zh-hans"):
        assert refused.value.message == f"任务 {task.pk} 当前为 needs_attention，并未暂停"
    with translation.override("en"):
        assert refused.value.message == str(refused.value)


def test_the_checkpoint_advice_keeps_its_commands_as_written():
    rule = next(r for r in RULES if r.name == "checkpoint-mismatch")
    rationale = Phrase(rule.rationale, dict(rule.quoted))

    assert "see where (manage.py checkpoint verify), rebuild them from the log (manage.py " in (
        rationale
    )
    with translation.override("zh-hans"):
        html = rationale.__html__()
    assert '（<span translate="no">manage.py checkpoint verify</span>）' in html
    assert '（<span translate="no">manage.py checkpoint restore</span>）' in html
    assert HAN.search(html)
