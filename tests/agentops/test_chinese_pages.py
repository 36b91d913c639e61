# ruff: noqa: RUF001 (the Chinese text the pages show has full-width punctuation)
"""The task pages, the policy pages and the error pages in Simplified Chinese: no English left on
them (`tests.english.english_left`) beyond the record, which the templates mark `translate="no"`,
and the names and codes tests/english.py allows; and the same pages in English still say what
they said.

Each page is read over HTTP, as a person whose browser asks for zh-Hans, with the data a person
meets: a refund waiting at its gate, a trip stopped on a refused hotel booking (its failure and
the advisor's recommendation), a parent waiting on a stopped child, a stop in force, a policy with
a draft and published versions.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import translation

from agentops import task_page
from agentops.plumbing.request_ids import fallback_page, server_error
from policies.models import Policy, PolicyVersion
from policies.services import policy_draft_create, policy_publish, policy_rule_add
from reviews.services.stops import fleet_stop_apply
from tests.agentops.test_subtasks import run_family
from tests.english import english_left, english_words
from tests.reviews.builders import client_for, gated_refund, stopped_trip
from tests.reviews.conftest import ensure_groups, make_user

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-Hans"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


def chinese(client: Client) -> Client:
    client.defaults.update(ZH)
    return client


# The advisor's words on a stopped task's page (where it stopped, why it recommends what it
# does): the engine's recovery assembly and the advisor write them (agentops/engine/recovery.py
# and agentops/engine/advisor, outside the pages' code); the page marks them `advisor-words`.
ADVISOR_WORDS = re.compile(r'<(dd|span) class="advisor-words">.*?</\1>', re.S)


def left(response: Any) -> list[str]:
    """The English words left on a response's page (its status checked by the caller), the
    advisor's words aside."""
    return english_left(ADVISOR_WORDS.sub("", response.content.decode()))


@pytest.fixture
def own_sections_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task page without the sections other apps register (the review section: its words
    are the reviews app's, checked by its own tests); the page's own parts stay."""
    monkeypatch.setattr(task_page, "SECTIONS", [])


@pytest.fixture
def people(django_user_model: Any) -> dict[str, Any]:
    """An operator who may also stop the fleet, a task starter, a policy admin and a viewer with
    no role."""
    ensure_groups()
    operator = make_user(django_user_model, "olga", "operators")
    operator.user_permissions.add(Permission.objects.get(codename="stop_fleet"))
    return {
        "operator": django_user_model.objects.get(pk=operator.pk),
        "starter": make_user(django_user_model, "sten", "task starters"),
        "admin": make_user(django_user_model, "paula", "policy admins"),
        "nobody": make_user(django_user_model, "nina"),
    }


def stopped_child_family(created_by: Any) -> Any:
    """A procurement parent waiting on its children, one of them stopped (suppliers refused)."""
    from agentops.dev.sim.services import fault_set
    from agentops.engine import task_create

    fault_set(service="suppliers", operation="quote", mode="forbidden", count=1)
    return run_family(
        task_create(
            agent="procurement",
            goal="Buy bolts",
            input={"item": "bolts", "quantity": 10},
            created_by=created_by,
        )
    )


def test_the_task_pages_read_in_chinese_for_each_role(sim, redis_clean, people, own_sections_only):
    operator, starter = people["operator"], people["starter"]
    gated = gated_refund(created_by=starter)
    stopped = stopped_trip(created_by=starter)
    parent = stopped_child_family(starter)
    child = parent.children.get(status="needs_attention")
    fleet_stop_apply(scope="agent", target="refund", reason="refunds look wrong", actor=operator)

    pages = {
        "list": reverse("agentops:task_list"),
        "list, filtered": reverse("agentops:task_list") + "?status=needs_attention",
        "list, none with the status": reverse("agentops:task_list") + "?status=cancelled",
        "gated": reverse("agentops:task_detail", args=[gated.pk]),
        "stopped": reverse("agentops:task_detail", args=[stopped.pk]),
        "parent": reverse("agentops:task_detail", args=[parent.pk]),
        "child": reverse("agentops:task_detail", args=[child.pk]),
        "start form": reverse("agentops:task_new"),
    }
    for who in ("operator", "starter"):
        client = chinese(client_for(people[who]))
        for name, url in pages.items():
            if name == "start form" and who == "operator":
                continue
            response = client.get(url)
            assert response.status_code == 200, (who, name)
            assert left(response) == [], (who, name)
            assert '<html lang="zh-hans">' in response.content.decode()

    # The advisor's words are there on a stopped task's page (two of them), and only there.
    stopped_page = chinese(client_for(operator)).get(pages["stopped"]).content.decode()
    assert len(ADVISOR_WORDS.findall(stopped_page)) == 2
    # The banner, the failure and the tree read in Chinese around the record.
    page = chinese(client_for(operator)).get(pages["stopped"]).content.decode()
    assert "停止已生效" in page and '<span translate="no">refunds look wrong</span>' in page
    assert '<span translate="no">hotels</span> 服务拒绝了请求：缺少权限' in page
    tree = chinese(client_for(operator)).get(pages["parent"]).content.decode()
    assert "在等待子任务" in tree


def test_the_start_form_and_its_errors_read_in_chinese(sim, people):
    client = chinese(client_for(people["starter"]))
    refused = client.post(
        reverse("agentops:task_new"), {"agent": "refund", "goal": "Refund A1001", "input": '{"a": '}
    )
    assert refused.status_code == 200
    page = refused.content.decode()
    assert "输入不是有效的 JSON：缺少值（第 1 行，第 6 列）。" in page
    assert left(refused) == []
    not_object = client.post(
        reverse("agentops:task_new"), {"agent": "refund", "goal": "Refund A1001", "input": "[1]"}
    )
    assert "实际为数组" in not_object.content.decode()
    # The message quotes the field's example, JSON (a code), which a plain-text error cannot mark.
    assert left(not_object) == english_words('{"order_id": "A1001"}')


def test_an_empty_task_list_reads_in_chinese(people):
    for who in ("starter", "nobody"):
        response = chinese(client_for(people[who])).get(reverse("agentops:task_list"))
        assert response.status_code == 200
        assert left(response) == [], who
    assert "发起一个" in chinese(client_for(people["starter"])).get("/").content.decode()


def test_the_error_pages_read_in_chinese(people):
    nobody = chinese(client_for(people["nobody"]))
    refused = nobody.get(reverse("agentops:task_new"))
    assert refused.status_code == 403
    assert "只有任务发起人可以发起任务。" in refused.content.decode()
    assert left(refused) == []

    missing = nobody.get(reverse("agentops:task_detail", args=[999_999]))
    assert missing.status_code == 404
    assert left(missing) == []

    expired = chinese(client_for(people["starter"], enforce_csrf_checks=True)).post(
        reverse("agentops:task_new"), {"agent": "refund", "goal": "x"}
    )
    assert expired.status_code == 403
    assert "此表单已过期" in expired.content.decode()
    assert left(expired) == []

    request = RequestFactory().get("/")
    request.request_id = "req-0123456789"  # type: ignore[attr-defined]
    with translation.override("zh-hans"):
        crashed = server_error(request)
        plain = fallback_page("req-0123456789")
    assert crashed.status_code == 500
    assert english_left(crashed.content.decode()) == []
    assert english_left(plain) == [] and "req-0123456789" in plain


@pytest.fixture
def policy(people: dict[str, Any]) -> tuple[Policy, PolicyVersion, PolicyVersion]:
    """The default policy with a published version (v2, from a draft with one more rule) and an
    open draft with a gate rule that needs two approvals."""
    admin = people["admin"]
    policy = Policy.objects.get(name="default")
    draft = policy_draft_create(policy=policy, author=admin)
    policy_rule_add(
        draft=draft,
        author=admin,
        fields={
            "name": "trips need approval",
            "route": "gate",
            "agents": ["trip"],
            "side_effects": ["financial"],
            "amount_above": 1000,
            "approver_group": "operators",
            "timeout_seconds": 3600,
            "timeout_action": "escalate",
            "escalate_to": "senior operators",
            "approvals_required": 2,
        },
    )
    published = policy_publish(draft=draft, author=admin, change_note="gate refunds")
    open_draft = policy_draft_create(policy=policy, author=admin)
    policy_rule_add(
        draft=open_draft,
        author=admin,
        fields={"name": "emails", "route": "auto", "side_effects": ["notify"]},
    )
    return policy, published, open_draft


def test_the_policy_pages_read_in_chinese(people, policy):
    policy_row, published, open_draft = policy
    client = chinese(client_for(people["admin"]))
    first = PolicyVersion.objects.filter(policy=policy_row).order_by("pk").first()
    assert first is not None
    pages = {
        "index": reverse("policies:index"),
        "policy": reverse("policies:policy_detail", args=[policy_row.pk]),
        "published": reverse("policies:version_detail", args=[published.pk]),
        "first": reverse("policies:version_detail", args=[first.pk]),
        "draft": reverse("policies:version_detail", args=[open_draft.pk]),
        "diff": reverse("policies:version_diff", args=[policy_row.pk])
        + f"?a={first.pk}&b={published.pk}",
        "diff, none chosen": reverse("policies:version_diff", args=[policy_row.pk]),
        "dry run": reverse("policies:version_dry_run", args=[open_draft.pk]),
    }
    # The policy's name is the only English: in the <title> of the policy's pages (a title holds
    # no markup to mark it with), and marked translate="no" everywhere else.
    for name, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, name
        title_words = [] if name == "index" else english_words(policy_row.name)
        page = response.content.decode()
        if name == "dry run":
            # The period's options are policies/forms.py's, translated there (not this page's).
            page = re.sub(r"<select .*?</select>", "", page, flags=re.S)
        assert english_left(page) == title_words, name


def test_the_pages_in_english_say_what_they_said(sim, redis_clean, people):
    stopped = stopped_trip(created_by=people["starter"])
    client = client_for(people["operator"])
    client.defaults.update(EN)
    page = client.get(reverse("agentops:task_detail", args=[stopped.pk])).content.decode()
    assert '<html lang="en">' in page
    assert "Stopped: needs attention" in page
    assert 'The <span translate="no">hotels</span> service refused: missing permission' in page
    assert "Side-effect ledger" in page and "Needs attention" in page
    listing = client.get(reverse("agentops:task_list")).content.decode()
    assert "All statuses" in listing and "Start a task" not in listing
    refused = client.get(reverse("agentops:task_new"))
    assert "Only task starters may start tasks." in refused.content.decode()
