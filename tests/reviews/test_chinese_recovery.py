"""The recovery side of the review workspace read in Simplified Chinese: the recovery panel (its
blocks, options, the grant, the unknown call, the plan repair, the confirmation), the task page's
review, again and grants sections, the account, the fleet's stops, the decision log, the
oversight report, the Slack link, the email link and the again form's page. Each, built from real
runs and seen by the roles that see it, leaves no English word outside the record (marked
`translate="no"`) and the names of `tests.english.ALLOWED`; the same pages in English still read
in English.

The page's frame (navigation, banner) is `base.html`'s, checked with the pages that own it: here
each page's `<main>` is read.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from agentops.engine import task_create
from agentops.models import Task
from agentops.states import TaskStatus
from agentops.tokens import api_token_create
from reviews.email_actions import email_action_link
from reviews.forms import DECISION_ACTIONS
from reviews.models import Delivery, Notice, SlackIdentity
from reviews.notice_text import headline
from reviews.notifications import notices_find
from reviews.services import gate_approve, intervention_apply, scope_grant_apply
from reviews.services.slack import slack_link_token
from reviews.services.stops import fleet_resume_apply, fleet_stop_apply
from reviews.states import VIA_BROWSER
from reviews.templatetags.reviews_tags import ACTION_LABELS, action_label
from tests.builders import run_until_parked_or_done
from tests.english import english_left
from tests.reviews.builders import (
    audited_refund,
    client_for,
    gated_refund,
    open_gate,
    stopped_trip,
    unknown_refund,
)
from tests.slack_api import TEAM_ID

pytestmark = pytest.mark.django_db

ZH = "zh-Hans"


def reader(user: Any, language: str = ZH) -> Client:
    client = client_for(user)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = language
    return client


def main_of(response: Any) -> str:
    """The page's `<main>` (the frame around it is `base.html`'s)."""
    html = response.content.decode()
    start = html.index("<main")
    return html[start : html.index("</main>", start)]


def section_of(page: str, marker: str) -> str:
    """The `<section>` of `page` whose opening tag holds `marker` (the task page's sections)."""
    at = page.index(marker)
    start = page.rindex("<section", 0, at)
    return page[start : page.index("</section>", at)]


def english_in(html: str) -> list[str]:
    return english_left(html)


def stopped_goodwill() -> Task:
    """A credit refused for a missing scope (`payments:credit`): the advisor recommends a grant."""
    task = task_create(
        agent="goodwill", goal="Credit order A1010", input={"order_id": "A1010", "amount": 10}
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def sold_out_trip() -> Task:
    """A trip stopped on a conflict (its hotel is fully booked): the advisor recommends a repair."""
    task = task_create(
        agent="trip", goal="Trip to Rome", input={"traveller": "Ada", "hotel_id": "H0404"}
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def done_refund() -> Task:
    task = task_create(
        agent="refund", goal="Refund A1001", input={"order_id": "A1001", "reason": "damaged"}
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED
    return task


@pytest.fixture
def stopper(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("stella")
    user.user_permissions.add(Permission.objects.get(codename="stop_fleet"))
    return django_user_model.objects.get(pk=user.pk)


# -- the recovery panel ---------------------------------------------------------------------------


def test_the_recovery_panel_reads_in_chinese_for_operators_and_auditors(
    sim, redis_clean, operator, auditor, starter
):
    task = stopped_trip(created_by=starter)
    url = reverse("reviews:recover", args=[task.pk])

    for user in (operator, auditor):
        response = reader(user).get(url)
        assert response.status_code == 200
        assert english_in(main_of(response)) == [], user.username


def test_the_confirmation_of_a_rollback_reads_in_chinese(sim, redis_clean, operator, starter):
    task = stopped_trip(created_by=starter)
    url = reverse("reviews:intervention", args=[task.pk])
    body = {"action": "rollback", "reason": "customer cancelled"}

    response = reader(operator).post(url, body)

    assert 'id="confirm-step"' in response.content.decode()
    assert english_in(main_of(response)) == []


def test_the_grant_option_reads_in_chinese_for_granters_and_those_who_may_not_grant(
    sim, redis_clean, granter, operator
):
    task = stopped_goodwill()
    url = reverse("reviews:recover", args=[task.pk])

    granting = reader(granter).get(url)
    refused = reader(operator).get(url)

    assert 'id="scope-grant-form"' in granting.content.decode()
    assert 'id="grant-who"' in refused.content.decode()
    assert english_in(main_of(granting)) == []
    assert english_in(main_of(refused)) == []


def test_an_unknown_call_reads_in_chinese(sim, redis_clean, settings, operator, starter):
    task = unknown_refund(settings, created_by=starter)

    response = reader(operator).get(reverse("reviews:recover", args=[task.pk]))

    assert "unknown-" in response.content.decode()
    assert english_in(main_of(response)) == []


def test_the_plan_repair_and_its_preview_read_in_chinese(sim, redis_clean, operator):
    task = sold_out_trip()
    url = reverse("reviews:plan_repair", args=[task.pk])
    body = {
        "op": "instruct",
        "step": "3",
        "instruction": "Book hotel H7000 instead.",
        "reason": "sold out",
        "intent": "preview",
    }

    panel = reader(operator).get(reverse("reviews:recover", args=[task.pk]))
    preview = reader(operator).post(url, body)

    assert 'id="plan-repair"' in panel.content.decode()
    assert 'id="repair-preview"' in preview.content.decode()
    assert english_in(main_of(panel)) == []
    assert english_in(main_of(preview)) == []


def test_a_task_that_is_not_stopped_has_a_panel_in_chinese(sim, redis_clean, operator):
    task = done_refund()

    response = reader(operator).get(reverse("reviews:recover", args=[task.pk]))

    assert english_in(main_of(response)) == []


# -- the task page's sections ---------------------------------------------------------------------


def test_the_task_pages_review_again_and_grants_sections_read_in_chinese(
    sim, redis_clean, operator, granter, auditor
):
    old = done_refund()
    body = {"from_step": "4", "input": json.dumps(old.input), "reason": "resend"}
    assert client_for(operator).post(reverse("reviews:task_fork", args=[old.pk]), body).status_code
    fork = Task.objects.get(origin=old)
    stopped = stopped_goodwill()
    scope_grant_apply(
        task_id=stopped.pk,
        scope="payments:credit",
        to_agent=False,
        minutes=15,
        reason="credential predates it",
        actor=granter,
        via=VIA_BROWSER,
    )
    paused = stopped_trip()

    pages = {
        "old": reader(operator).get(reverse("agentops:task_detail", args=[old.pk])),
        "fork": reader(auditor).get(reverse("agentops:task_detail", args=[fork.pk])),
        "granted": reader(granter).get(reverse("agentops:task_detail", args=[stopped.pk])),
        "stopped": reader(operator).get(reverse("agentops:task_detail", args=[paused.pk])),
    }

    sections = {
        "old review": section_of(pages["old"].content.decode(), 'id="review-heading"'),
        "old again": section_of(pages["old"].content.decode(), 'id="again"'),
        "fork again": section_of(pages["fork"].content.decode(), 'id="again"'),
        "grants": section_of(pages["granted"].content.decode(), 'id="scope-grants"'),
        "controls": section_of(pages["stopped"].content.decode(), 'id="review-heading"'),
    }
    assert 'id="restart-form"' in sections["old again"]
    assert 'id="referenced-ledger"' in sections["fork again"]
    assert 'id="task-controls"' in sections["controls"]
    for name, html in sections.items():
        assert english_in(html) == [], name


def test_the_again_forms_page_reads_in_chinese(sim, redis_clean, operator):
    old = done_refund()

    response = reader(operator).post(
        reverse("reviews:task_restart", args=[old.pk]),
        {"ending": "keep", "input": "{not json", "reason": "x"},
    )

    assert response.status_code == 400
    assert english_in(main_of(response)) == []


# -- the account, the stops, the log, the report -------------------------------------------------


def test_the_account_page_reads_in_chinese(sim, redis_clean, operator, settings):
    operator.email = "olga@example.com"
    operator.save(update_fields=["email"])
    open_gate(gated_refund())
    notices_find()
    assert Delivery.objects.filter(user=operator).exists()
    SlackIdentity.objects.create(user=operator, team_id=TEAM_ID, slack_user_id="U0OLGA")
    api_token_create(user=operator, name="laptop")
    client = reader(operator)

    made = client.post(reverse("reviews:api_token_new"), {"name": "ci"}, follow=True)

    assert "ao_" in made.content.decode()
    assert english_in(main_of(made)) == []


def test_the_fleet_stops_page_reads_in_chinese(sim, redis_clean, stopper):
    fleet_stop_apply(scope="agent", target="refund", reason="bad refunds", actor=stopper)
    fleet_stop_apply(scope="tool", target="issue_refund", reason="double refunds", actor=stopper)
    lifted = fleet_stop_apply(scope="all", reason="incident 9", actor=stopper)
    fleet_resume_apply(stop_id=lifted.stop.pk, reason="fine", actor=stopper)

    response = reader(stopper).get(reverse("reviews:fleet_stops"))

    assert english_in(main_of(response)) == []


def test_the_decision_log_reads_in_chinese(sim, redis_clean, operator, policy_admin, starter):
    gate = open_gate(gated_refund(created_by=starter))
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest, reason="ok")
    trip = stopped_trip(created_by=starter)
    intervention_apply(task_id=trip.pk, action="abort", actor=operator, reason="not needed")

    response = reader(policy_admin).get(reverse("reviews:decisions"))

    assert english_in(main_of(response)) == []


def test_the_oversight_report_reads_in_chinese(sim, redis_clean, operator, starter):
    audited_refund()
    gate = open_gate(gated_refund(created_by=starter))
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    response = reader(operator).get(reverse("reviews:oversight"))

    assert english_in(main_of(response)) == []


# -- links from Slack and email ------------------------------------------------------------------


def test_the_slack_link_page_reads_in_chinese(operator):
    token = slack_link_token(team_id=TEAM_ID, slack_user_id="U0OLGA")

    asking = reader(operator).get(reverse("reviews:slack_link", args=[token]))
    broken = reader(operator).get(reverse("reviews:slack_link", args=[token + "x"]))

    assert english_in(main_of(asking)) == []
    assert 'id="link-error"' in broken.content.decode()
    assert english_in(main_of(broken)) == []


def test_the_email_link_pages_read_in_chinese(sim, redis_clean, operator, operator2, settings):
    gate = open_gate(gated_refund())
    approve = email_action_link(gate=gate, user=operator, action="approve")
    path = re.sub(r"^https?://[^/]+", "", approve)

    asking = reader(operator).get(path)
    gate_approve(gate_id=gate.pk, actor=operator2, seen_digest=gate.args_digest)
    decided = reader(operator).get(path)
    broken = reader(operator).get(path + "x")

    assert 'id="confirm-head"' in asking.content.decode()
    assert 'id="gate-state"' in decided.content.decode()
    assert 'id="link-error"' in broken.content.decode()
    for response in (asking, decided, broken):
        assert english_in(main_of(response)) == []


def test_the_account_names_what_was_sent_in_the_readers_language(sim, redis_clean, operator):
    """The account's list of what was sent names each notice as its email's subject does, in the
    reader's language; the stored English text (the record) is not repeated there."""
    operator.email = "olga@example.com"
    operator.save(update_fields=["email"])
    open_gate(gated_refund())
    notices_find()
    notice = Notice.objects.get()
    with translation.override("zh-hans"):
        chinese = headline(notice)

    page = main_of(reader(operator).get(reverse("reviews:account")))
    english = main_of(client_for(operator).get(reverse("reviews:account")))

    assert f'<a href="{notice.link}">{escape(chinese)}</a>' in page
    assert chinese != f"A gate opened: task {notice.task_id}"
    assert escape(notice.text[:40]) not in page
    assert f'<a href="{notice.link}">A gate opened: task {notice.task_id}</a>' in english


def test_every_action_the_log_filters_by_has_a_whole_label_and_a_new_one_stays_as_written():
    """The decision log names each action by a label translated whole; an action without one
    (added later) reads as its name made readable, kept as written."""
    leaves = [
        value
        for _group, choices in DECISION_ACTIONS[1:]
        for value, _label in choices
        if value.count(".") == 2
    ]

    with translation.override("zh-hans"):
        chinese = {action: action_label(action) for action in leaves}
        unknown = action_label("reviews.widget.polished")

    assert len(leaves) == 34
    assert [a for a in leaves if a not in ACTION_LABELS] == []
    assert [a for a, label in chinese.items() if english_left(label)] == []
    assert unknown == '<span translate="no">widget polished</span>'
    assert action_label("reviews.gate.rejected_and_stopped") == "gate rejected and stopped"


# -- the same pages in English -------------------------------------------------------------------


def test_the_same_pages_still_read_in_english(sim, redis_clean, operator, granter, stopper):
    """Without a language asked for, the pages say what they said before they were marked."""
    trip = stopped_trip()
    confirm = client_for(operator).post(
        reverse("reviews:intervention", args=[trip.pk]), {"action": "rollback", "reason": "x"}
    )
    goodwill = stopped_goodwill()
    gate = open_gate(gated_refund())
    gate_approve(gate_id=gate.pk, actor=granter, seen_digest=gate.args_digest, reason="ok")
    fleet_stop_apply(scope="agent", target="refund", reason="bad refunds", actor=stopper)

    pages = {
        "recover": main_of(client_for(operator).get(reverse("reviews:recover", args=[trip.pk]))),
        "confirm": main_of(confirm),
        "grant": main_of(client_for(operator).get(reverse("reviews:recover", args=[goodwill.pk]))),
        "account": main_of(client_for(operator).get(reverse("reviews:account"))),
        "stops": main_of(client_for(stopper).get(reverse("reviews:fleet_stops"))),
        "decisions": main_of(client_for(operator).get(reverse("reviews:decisions"))),
        "oversight": main_of(client_for(operator).get(reverse("reviews:oversight"))),
    }

    assert "Recover task #" in pages["recover"] and "Did this call happen?" not in pages["recover"]
    assert "Undoes, in order" in pages["recover"] and ">Rollback</button>" in pages["recover"]
    assert "<strong>Step 3 of 4, after the tool call" in pages["recover"]
    assert "Confirm rollback" in pages["confirm"]
    assert "Ask one of the scope granters to grant it" in pages["grant"]
    assert "Sent to you lately" in pages["account"] and "API tokens" in pages["account"]
    assert 'Every task of agent <span translate="no">refund</span>' in pages["stops"]
    assert "1 task paused when it was made." in pages["stops"] or "tasks paused" in pages["stops"]
    assert "Export these as CSV" in pages["decisions"] and ">gate approved<" in pages["decisions"]
    assert "Oversight report" in pages["oversight"]
