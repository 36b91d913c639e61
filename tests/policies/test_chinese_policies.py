# ruff: noqa: RUF001
"""The policy editor's own words in Simplified Chinese: validation messages, refusals, form labels
and help, the change preview and history, rule criteria. The record (rule, tool and group names)
stays as written inside `translate="no"`; the validation codes and the English a message stores
do not depend on the reader's language."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from policies.engine import Rule
from policies.models import Policy, PolicyRule, PolicyVersion
from policies.phrases import Phrase
from policies.selectors import policy_version_validate
from policies.services import policy_rule_add
from policies.validation import validate
from tests.english import english_left
from tests.policies.conftest import make_draft

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-Hans"}
HTMX = {"HTTP_HX_REQUEST": "true"}
BAD_RULE = {
    "name": "bad",
    "route": "gate",
    "confidence_below": "1.5",
    "tools": "teleport",
    "side_effects": "telepathy",
    "approver_group": "ops",
}


def words(page: str) -> str:
    """The page's text as a person reads it: no markup, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


@pytest.fixture
def draft(default_policy: Policy, policy_admin: Any) -> PolicyVersion:
    return make_draft(policy=default_policy, author=policy_admin)


def test_an_invalid_rule_is_answered_in_chinese_naming_the_same_place(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    url = reverse("policies:rule_add", args=[draft.pk])
    english = words(admin_client.post(url, BAD_RULE, **HTMX).content.decode())
    PolicyRule.objects.filter(version=draft, name="bad").delete()

    response = admin_client.post(url, BAD_RULE, **HTMX, **ZH)

    page = response.content.decode()
    chinese = words(page)
    assert response.status_code == 200
    assert "rule 8 'bad' has confidence baseline 1.5, outside [0, 1]" in english
    assert "规则 8“bad”的置信度基线为 1.5，超出 [0, 1]" in chinese
    assert "规则 8“bad”引用了未知工具 'teleport'" in chinese
    assert "规则 8“bad”引用了未知的副作用类别 'telepathy'" in chinese
    assert "规则 8“bad”是未设超时的审批关卡" in chinese
    # The rule's and the tool's names are the record: kept as written, not translated.
    assert '规则 8“<span translate="no">bad</span>”的置信度基线为' in page
    assert "confidence baseline" not in chinese


def test_validation_keeps_codes_and_english_whatever_the_language(tools: Any) -> None:
    rules = [
        Rule("bad", "gate", confidence_below=1.5, approver_group="ops"),
        Rule("default", "audit", is_default=True),
    ]

    with translation.override("zh-hans"):
        messages = validate(rules, None, ["read"])
        shown = [m.message.shown() for m in messages if isinstance(m.message, Phrase)]
        rendered = [str(m.message.__html__()) for m in messages if isinstance(m.message, Phrase)]

    assert [(m.code, m.position, m.rule) for m in messages] == [
        ("confidence_out_of_range", 1, "bad"),
        ("gate_without_timeout", 1, "bad"),
    ]
    assert messages[0].message == "rule 1 'bad' has confidence baseline 1.5, outside [0, 1]"
    assert shown == [
        "规则 1“bad”的置信度基线为 1.5，超出 [0, 1]",
        "规则 1“bad”是未设超时的审批关卡",
    ]
    assert [english_left(text) for text in rendered] == [[], []]


def test_the_editor_page_speaks_chinese_in_its_form_preview_and_history(
    admin_client: Client, draft: PolicyVersion, policy_admin: Any, tools: Any
) -> None:
    policy_rule_add(
        draft=draft,
        author=policy_admin,
        fields={"name": "big refunds", "route": "gate", "amount_above": 500, "timeout_seconds": 60},
        position=0,
    )

    response = admin_client.get(reverse("policies:version_detail", args=[draft.pk]), **ZH)

    page = response.content.decode()
    text = words(page)
    assert response.status_code == 200
    for chinese in (
        "审批组",  # a field's label
        "超时秒数",
        "仅用于审批关卡；3600 即一小时。",  # a field's help
        "用逗号分隔；已知类别：",  # the side-effect classes' help, the classes kept as written
        "规则 1 之前",  # where a new rule goes
        "与生效的 v1 相比：新增 1 条（请查看差异和试运行）。",  # what publishing changes
        "金额高于 500",  # a rule's criteria
        "添加了规则",  # the history
        "“big refunds”，位置 1",
        "我已阅读与当前生效版本相比的变化",
    ):
        assert chinese in text, chinese
    assert '“<span translate="no">big refunds</span>”，位置 1' in page
    for english in ("Approver group", "Compared with the active", "amount above", "added a rule"):
        assert english not in text, english


def test_refusals_of_the_services_and_views_read_in_chinese(
    admin_client: Client, draft: PolicyVersion, tools: Any
) -> None:
    url = reverse("policies:rule_add", args=[draft.pk])
    taken = {"name": "default", "route": "audit"}

    conflict = words(admin_client.post(url, taken, **HTMX, **ZH).content.decode())
    english = words(admin_client.post(url, taken, **HTMX).content.decode())
    PolicyRule.objects.filter(version=draft, is_default=True).delete()
    refused = words(
        admin_client.post(
            reverse("policies:version_publish", args=[draft.pk]),
            {"change_note": "x", "confirm": "on"},
            **HTMX,
            **ZH,
        ).content.decode()
    )

    assert "此草稿中已有名为 'default' 的规则" in conflict
    assert "this draft already has a rule named 'default'" in english
    assert "未发布：草稿有 1 条校验消息；请修正上面列出的错误。" in refused
    assert "策略没有默认规则：请添加一条默认规则作为最后一条规则" in refused
    assert not PolicyVersion.objects.filter(pk=draft.pk, number__isnull=False).exists()


def test_a_non_admin_is_refused_in_chinese(client: Client, author: Any) -> None:
    client.force_login(author)

    response = client.get(reverse("policies:index"), **ZH)

    assert response.status_code == 403
    assert "只有策略管理员可以查看或修改策略" in words(response.content.decode())


def test_diff_and_dry_run_pages_show_criteria_and_periods_in_chinese(
    admin_client: Client,
    default_policy: Policy,
    draft: PolicyVersion,
    policy_admin: Any,
    tools: Any,
) -> None:
    policy_rule_add(
        draft=draft,
        author=policy_admin,
        fields={"name": "slow", "route": "audit", "confidence_below": 0.4, "agents": ["triage"]},
        position=0,
    )
    active = PolicyVersion.objects.get(policy=default_policy, number=1)

    diff = admin_client.get(
        reverse("policies:version_diff", args=[default_policy.pk]),
        {"a": active.pk, "b": draft.pk},
        **ZH,
    ).content.decode()
    dry_run = admin_client.get(
        reverse("policies:version_dry_run", args=[draft.pk]), {"days": 7}, **ZH
    ).content.decode()

    assert "置信度低于 0.4，且智能体属于 triage" in words(diff)
    assert f"草稿 #{draft.pk}" in words(diff)
    assert "7 天" in words(dry_run)
    assert "confidence below" not in words(diff)


def test_a_validation_message_is_english_in_the_record_after_a_chinese_request(
    draft: PolicyVersion, tools: Any
) -> None:
    PolicyRule.objects.filter(version=draft, is_default=True).delete()

    with translation.override("zh-hans"):
        messages = policy_version_validate(draft)

    assert [m.code for m in messages] == ["missing_default"]
    assert messages[0].message == (
        "the policy has no default rule: add a default rule as the last rule"
    )


def test_the_dry_runs_period_choices_follow_the_readers_language_whoever_loaded_the_form():
    """The labels are translated when shown, not when the module was first imported (in the
    language of whichever request imported it)."""
    from policies.forms import DAYS_CHOICES

    with translation.override("en"):
        english = [str(label) for _, label in DAYS_CHOICES]
    with translation.override("zh-hans"):
        chinese = [str(label) for _, label in DAYS_CHOICES]

    assert english[:2] == ["1 day", "7 days"]
    assert chinese[:2] == ["1 天", "7 天"]
