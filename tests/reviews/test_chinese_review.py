"""The review pages in Simplified Chinese: the inbox, the gate and question panels, the dashboard,
the audit queue and its item page, the rubric, rubrics and adjudication pages, each rendered for
the roles that see it with realistic data (tasks brought to a gate, a question or a stop by the
real engine; audit items, rubric reviews and figures written as rows), leave no English outside
the record (`translate="no"`) and the names and codes `tests.english` allows. The same pages in
English still read in English.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agentops.models import Gate
from reviews.services import claim_take, gate_approve, rubric_review_submit
from tests.english import english_left
from tests.reviews.builders import (
    asked_question,
    client_for,
    gated_refund,
    open_gate,
    stopped_trip,
)
from tests.reviews.conftest import make_user
from tests.reviews.history import make_audit_item, make_task
from tests.reviews.test_dashboard import full_history
from tests.reviews.test_four_eyes import four_eyes_gate
from tests.reviews.test_rubrics import answers, refund_item_made, rubric

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-Hans"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


def english_on(client: Client, url: str, *, data: Any = None, post: bool = False) -> list[str]:
    """The English words left on the page at `url` read in zh-Hans (status 200 or, for a form
    sent back with its errors, 400)."""
    send = client.post if post else client.get
    response = send(url, data, follow=post, **ZH)
    assert response.status_code in (200, 400), (url, response.status_code)
    assert 'lang="zh-hans"' in response.content.decode().lower()
    return english_left(response.content.decode())


def in_english(client: Client, url: str) -> str:
    response = client.get(url, **EN)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def ben(groups: Any, django_user_model: Any) -> Any:
    return make_user(django_user_model, "ben", "auditors")


def test_the_inbox_and_the_panels_read_in_chinese_for_each_role(
    sim, redis_clean, operator, operator2, auditor, starter
):
    gate = open_gate(gated_refund(created_by=starter))
    stopped_trip(created_by=starter)
    question = asked_question(created_by=starter)
    claim_take(task_id=gate.task_id, actor=operator2)
    urls = [
        reverse("reviews:inbox"),
        reverse("reviews:inbox") + "?kind=question&agent=refund_ask",
        reverse("reviews:inbox") + "?q=nothing-matches-this",
        reverse("reviews:gate", args=[gate.pk]),
        reverse("reviews:question", args=[question.pk]),
    ]

    left = {
        (user.username, url): english_on(client_for(user), url)
        for user in (operator, auditor, starter)
        for url in urls
    }

    assert left == {key: [] for key in left}
    english = in_english(client_for(operator), reverse("reviews:gate", args=[gate.pk]))
    assert "What each choice leads to" in english and "Reject with feedback" in english
    refused = in_english(client_for(auditor), reverse("reviews:gate", args=[gate.pk]))
    group = '<span translate="no">&#x27;operators&#x27;</span>'
    assert f"You cannot decide this gate: only members of {group} may decide this gate." in refused


def test_decided_gates_and_answered_questions_read_in_chinese(sim, redis_clean, operator, starter):
    approved = open_gate(gated_refund(created_by=starter))
    edited = open_gate(gated_refund(created_by=starter, order_id="B2002", goal="Refund again"))
    rejected = open_gate(gated_refund(created_by=starter, goal="Refund once more"))
    question = asked_question(created_by=starter)
    client = client_for(operator)
    client.defaults.update(ZH)
    client.post(
        reverse("reviews:gate_approve", args=[approved.pk]),
        {"seen_digest": approved.args_digest},
    )
    client.post(
        reverse("reviews:gate_edit", args=[edited.pk]),
        {
            "seen_digest": edited.args_digest,
            "arguments": '{"amount": 50.0, "currency": "EUR", "order_id": "B2002"}',
            "reason": "half is enough",
        },
    )
    client.post(
        reverse("reviews:gate_reject_stop", args=[rejected.pk]),
        {
            "seen_digest": rejected.args_digest,
            "outcome": "abort",
            "reason": "not eligible",
            "confirm": "on",
        },
    )
    client.post(
        reverse("reviews:question_answer", args=[question.pk]),
        {"seen_digest": question.args_digest, "choice": "half"},
    )
    assert Gate.objects.filter(status="open").count() == 0

    left = {
        url: english_on(client, url)
        for url in [
            reverse("reviews:gate", args=[approved.pk]),
            reverse("reviews:gate", args=[edited.pk]),
            reverse("reviews:gate", args=[rejected.pk]),
            reverse("reviews:question", args=[question.pk]),
            reverse("reviews:inbox"),
        ]
    }

    assert left == {url: [] for url in left}


def test_a_two_person_gate_reads_in_chinese_on_its_panel_and_in_the_inbox(
    sim, redis_clean, operator, operator2, starter
):
    gate = four_eyes_gate(starter=starter, author=starter)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    client = client_for(operator2)

    left = {
        url: english_on(client, url)
        for url in [reverse("reviews:gate", args=[gate.pk]), reverse("reviews:inbox")]
    }

    assert left == {url: [] for url in left}


def test_bulk_approval_results_and_errors_read_in_chinese(sim, redis_clean, operator, starter):
    gate = open_gate(gated_refund(created_by=starter))
    client = client_for(operator)
    url = reverse("reviews:gates_bulk_approve")

    done = english_on(client, url, data={"gate": f"{gate.pk}:{gate.args_digest}"}, post=True)
    refused = english_on(client, url, data={}, post=True)

    assert (done, refused) == ([], [])


def test_the_dashboard_reads_in_chinese_for_an_auditor_and_a_policy_admin(
    clock, operator, auditor, policy_admin
):
    full_history(clock, operator, auditor)
    task = make_task(clock)
    for status, confidence in [("flagged", 0.55), ("flagged", 0.6), ("ok", 0.9), ("ok", 0.95)]:
        make_audit_item(clock, task, status=status, confidence=confidence)
    url = reverse("reviews:dashboard") + "?date_from=2026-03-01&date_to=2026-03-07"

    left = {user.username: english_on(client_for(user), url) for user in (auditor, policy_admin)}
    empty = english_on(client_for(auditor), reverse("reviews:dashboard") + "?date_from=2020-01-01")

    assert left == {"audrey": [], "paula": []} and empty == []
    assert "Reviewer quality" in in_english(client_for(auditor), url)
    assert "4 of 6 decisions in under 3 s" in in_english(client_for(policy_admin), url)


def test_the_audit_and_rubric_pages_read_in_chinese_for_each_role(
    clock, policy_admin, auditor, ben, senior_auditor, operator
):
    rubric(policy_admin)
    disputed = refund_item_made(clock)
    rubric_review_submit(item_id=disputed.pk, actor=ben, answers=answers(), verdict="ok")
    rubric_review_submit(
        item_id=disputed.pk, actor=auditor, answers=answers(cause="delay"), verdict="ok"
    )
    waiting = refund_item_made(clock)
    plain = make_audit_item(clock, make_task(clock), rule="read", route="auto", sampled=True)
    queue = reverse("reviews:audit")
    pages = {
        "queue": queue,
        "filtered out": queue + "?date_from=2020-01-01&date_to=2020-01-02",
        "rubric, to answer": reverse("reviews:audit_rubric", args=[waiting.pk]),
        "rubric, disputed": reverse("reviews:audit_rubric", args=[disputed.pk]),
        "rubrics": reverse("reviews:rubrics"),
        "adjudication": reverse("reviews:adjudication"),
    }

    seen_by = {
        auditor: list(pages),
        ben: list(pages),
        senior_auditor: list(pages),
        operator: ["queue", "filtered out"],
        policy_admin: ["rubrics"],
    }

    left = {
        (user.username, name): english_on(client_for(user), pages[name])
        for user, names in seen_by.items()
        for name in names
    }
    flag_without_note = english_on(
        client_for(auditor),
        reverse("reviews:audit_review", args=[plain.pk]),
        data={"verdict": "flagged", "note": ""},
        post=True,
    )

    assert left == {key: [] for key in left}
    assert flag_without_note == []
    assert "Take a batch" in in_english(client_for(auditor), queue)
