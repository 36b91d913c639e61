# ruff: noqa: RUF001 - the expected texts are Chinese, with its full-width punctuation.
"""The review pages' Python texts in Simplified Chinese: flash messages, form labels and choices,
form errors, 403 refusals and the relative times the templates print, each read by a person in
zh-Hans; and the same requests in English still say what they said."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.english import english_left
from tests.reviews.builders import client_for, gated_refund, open_gate, stopped_trip

pytestmark = pytest.mark.django_db


def _in(user: Any, language: str) -> Client:
    client = client_for(user)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = language
    return client


def _messages(html: str) -> str:
    """The flash messages' block of a page (empty when it shows none)."""
    found = re.search(r'<div class="messages".*?</div>\s*</div>', html, re.S)
    return found.group(0) if found else ""


def test_a_refused_cancel_says_why_in_chinese_and_in_english(operator: Any, starter: Any) -> None:
    task = stopped_trip(created_by=starter)
    url = reverse("reviews:task_cancel", args=[task.pk])
    chinese = _in(operator, "zh-Hans").post(url, follow=True).content.decode()
    shown = _messages(chinese)
    assert "未做任何更改：请勾选复选框，确认立即结束任务。" in shown
    assert english_left(shown) == []
    english = _in(operator, "en").post(url, follow=True).content.decode()
    assert "Nothing changed: tick the box to confirm that the task ends now." in english


def test_a_refusal_403_reads_in_chinese(auditor: Any, starter: Any) -> None:
    task = stopped_trip(created_by=starter)
    response = _in(auditor, "zh-Hans").post(reverse("reviews:task_pause", args=[task.pk]))
    assert response.status_code == 403
    assert "只有操作员可以执行此操作" in response.content.decode()
    english = _in(auditor, "en").post(reverse("reviews:task_pause", args=[task.pk]))
    assert "only operators may do this" in english.content.decode().lower()


def test_the_inbox_filters_and_waits_read_in_chinese(sim: Any, operator: Any, starter: Any) -> None:
    open_gate(gated_refund(created_by=starter))
    stopped_trip(created_by=starter)
    html = _in(operator, "zh-Hans").get(reverse("reviews:inbox")).content.decode()
    for words in ("所有智能体", "所有规则", "最先到期", "已等待 1 小时以上", "仅看我的"):
        assert words in html, words
    select = re.search(r'<select name="sort".*?</select>', html, re.S)
    assert select is not None and english_left(select.group(0)) == []
    english = _in(operator, "en").get(reverse("reviews:inbox")).content.decode()
    assert "Due first" in english and "All agents" in english


def test_the_decision_log_filter_reads_in_chinese(operator: Any) -> None:
    html = _in(operator, "zh-Hans").get(reverse("reviews:decisions")).content.decode()
    select = re.search(r'<select name="action".*?</select>', html, re.S)
    assert select is not None
    assert "所有操作" in select.group(0) and "编辑后批准" in select.group(0)
    assert english_left(select.group(0)) == []


def test_an_empty_batch_says_so_in_chinese(auditor: Any) -> None:
    response = _in(auditor, "zh-Hans").post(
        reverse("reviews:audit_batch_take"), {"size": 5, "minutes": 10}, follow=True
    )
    shown = _messages(response.content.decode())
    assert "没有等待审核的未领取条目。" in shown
    assert english_left(shown) == []
