"""Each figure of the dashboard, from known history: the number the selectors compute, then the
page and the report command showing the same numbers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from agentops.metrics import Window, resume_savings, task_completion, task_tokens_saved_by_resume
from agentops.states import TaskStatus
from reviews.metrics import audit_outcomes, figures_collect, human_load, reviewer_quality
from tests.reviews.builders import client_for
from tests.reviews.history import (
    T0,
    decide,
    make_audit_item,
    make_gate,
    make_task,
)

pytestmark = pytest.mark.django_db

WEEK = Window(since=datetime(2026, 3, 1, tzinfo=UTC), until=datetime(2026, 3, 8, tzinfo=UTC))
S = timedelta(seconds=1)


# -- completion ----------------------------------------------------------------------------------


def completion_history(clock):
    for _ in range(3):
        make_task(clock, status=TaskStatus.SUCCEEDED, step_count=3)
    make_task(
        clock,
        status=TaskStatus.NEEDS_ATTENTION,
        current_step=1,
        failure_kind="authorization_gap",
    )
    make_task(clock, status=TaskStatus.ABORTED, current_step=2, failure_kind="budget_overflow")
    make_task(clock, status=TaskStatus.RUNNING, current_step=1)
    # Outside the window, and another agent's task.
    make_task(clock, at=T0 - timedelta(days=10), status=TaskStatus.ABORTED)
    make_task(clock, agent="trip", status=TaskStatus.ABORTED, failure_kind="context_overflow")


def test_completion_rate_counts_settled_tasks_that_reached_their_last_step(clock):
    completion_history(clock)

    figures = task_completion(Window(since=WEEK.since, until=WEEK.until, agent="refund"))

    assert (figures.tasks, figures.settled, figures.in_flight) == (6, 5, 1)
    assert figures.reached_last_step == 3
    assert figures.rate == pytest.approx(0.6)


def test_completion_says_where_the_others_stopped_and_why(clock):
    completion_history(clock)

    refund = task_completion(Window(since=WEEK.since, until=WEEK.until, agent="refund"))
    everyone = task_completion(WEEK)

    assert refund.stopped_at == {2: 1, 3: 1}
    assert refund.failure_kinds == {"authorization_gap": 1, "budget_overflow": 1}
    assert refund.seed_modes == {"authorization gap": 1, "duration overflow": 1}
    assert everyone.seed_modes["context exhaustion"] == 1
    assert everyone.rate == pytest.approx(3 / 6)


# -- resume savings ------------------------------------------------------------------------------


def savings_history(clock):
    """Three tasks with what the runner recorded: two resumed (one after a retry, one after a
    crash), one that ran straight through."""
    retried = make_task(clock, tokens_used=500, tokens_saved=350)
    crashed = make_task(clock, tokens_used=40, tokens_saved=15)
    smooth = make_task(clock, tokens_used=99)
    return retried, crashed, smooth


def test_tokens_saved_by_resume_are_what_the_runner_recorded(clock):
    retried, crashed, smooth = savings_history(clock)

    saved = task_tokens_saved_by_resume([retried.pk, crashed.pk, smooth.pk])

    assert saved == {retried.pk: 350, crashed.pk: 15}
    assert task_tokens_saved_by_resume([smooth.pk]) == {}


def test_resume_savings_compare_spent_with_reruns_from_scratch(clock, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "COST_PER_1K_TOKENS": 2.0}
    savings_history(clock)

    figures = resume_savings(WEEK)

    assert figures.tokens_spent == 639
    assert figures.tokens_saved == 365
    assert figures.tokens_from_scratch == 1004
    assert figures.cost_saved == Decimal("0.730")
    assert figures.tasks_resumed == 2


# -- human load ----------------------------------------------------------------------------------


def load_history(clock):
    task = make_task(clock, status=TaskStatus.AWAITING_APPROVAL)
    day1, day2, day3 = T0, T0 + timedelta(days=1), T0 + timedelta(days=2)
    make_gate(clock, task, opened=day1, status="approved", decided=day1 + 60 * S)
    make_gate(clock, task, opened=day1 + 3600 * S, status="rejected", decided=day1 + 3720 * S)
    # Escalated after its first due time, then approved in time for the second: a breach.
    escalated = make_gate(
        clock, task, opened=day1 + 7200 * S, status="approved", decided=day1 + 7320 * S
    )
    decide(clock, actor=None, action="reviews.gate.escalated", at=day1 + 7260 * S, gate=escalated)
    # Decided after its due time: an SLA breach.
    make_gate(
        clock, task, opened=day2, rule="notification", status="approved", decided=day2 + 4000 * S
    )
    # Expired by the sweeper: a breach and a timeout taken.
    expired = make_gate(
        clock,
        task,
        opened=day2 + 600 * S,
        rule="notification",
        status="expired",
        decided=day2 + 4205 * S,
    )
    decide(clock, actor=None, action="reviews.gate.expired", at=day2 + 4205 * S, gate=expired)
    # Still open: one past its due time (a breach), one not yet due.
    make_gate(clock, task, opened=day3, rule="default")
    make_gate(clock, task, opened=day3 + 7000 * S, rule="default")
    clock.at(day3 + 7200 * S)


def test_human_load_counts_gates_per_day_and_rule(clock):
    load_history(clock)

    load = human_load(WEEK)

    assert load.gates == 7
    assert load.gates_per_day == [
        (T0.date(), "large payment", 3),
        ((T0 + timedelta(days=1)).date(), "notification", 2),
        ((T0 + timedelta(days=2)).date(), "default", 2),
    ]


def test_decision_latency_percentiles_cover_gates_people_decided(clock):
    load_history(clock)

    load = human_load(WEEK)

    # People decided in 60, 120, 120 and 4000 s; the expired gate is a timeout, not a decision.
    assert load.decided_by_people == 4
    assert load.latency_p50_s == pytest.approx(120.0)
    assert load.latency_p95_s == pytest.approx(120 + (4000 - 120) * 0.85)


def test_sla_breaches_and_timeouts_taken(clock):
    load_history(clock)

    load = human_load(WEEK)

    # Decided late, expired, escalated, and open past due.
    assert load.sla_breaches == 4
    assert load.timeouts_taken == 2


# -- reviewer quality ----------------------------------------------------------------------------


def quality_history(clock, operator, auditor):
    task = make_task(clock, status=TaskStatus.AWAITING_APPROVAL)
    gates = [make_gate(clock, task, opened=T0, ordinal=i) for i in range(6)]
    steps = [
        ("reviews.gate.approved", 10, False),
        ("reviews.gate.approved", 12, False),
        ("reviews.gate.edited", 13, False),
        ("reviews.gate.rejected", 40, False),
        ("reviews.gate.approved", 41, True),
        ("reviews.gate.approved", 42, True),
    ]
    for gate, (action, second, bulk) in zip(gates, steps, strict=True):
        decide(clock, actor=operator, action=action, at=T0 + second * S, gate=gate, bulk=bulk)
    first = make_audit_item(clock, task, at=T0, status="ok")
    second = make_audit_item(clock, task, at=T0 + 50 * S, status="flagged")
    decide(clock, actor=auditor, action="reviews.audit.ok", at=T0 + 100 * S, item=first)
    decide(clock, actor=auditor, action="reviews.audit.flagged", at=T0 + 200 * S, item=second)


def test_reviewer_quality_per_person(clock, operator, auditor):
    quality_history(clock, operator, auditor)

    rows = {r.person: r for r in reviewer_quality(WEEK)}

    olga = rows["olga"]
    # Think times: 10, 2, 1, 27, 1, 1 s (from the gate, or the previous decision if later).
    assert olga.decisions == 6
    assert olga.median_seconds == pytest.approx(1.5)
    assert olga.approval_rate == pytest.approx(5 / 6)
    assert olga.edits == 1
    assert olga.fast == 4
    assert olga.longest_approve_streak == 3
    assert olga.bulk_share == pytest.approx(2 / 5)
    assert olga.flags == ["4 of 6 decisions in under 3 s"]
    audrey = rows["audrey"]
    assert (audrey.decisions, audrey.median_seconds, audrey.fast) == (2, 100.0, 0)
    assert audrey.approval_rate == pytest.approx(0.5)
    assert audrey.flags == []


def test_the_fast_threshold_is_a_parameter(clock, operator, auditor):
    quality_history(clock, operator, auditor)

    rows = {r.person: r for r in reviewer_quality(WEEK, fast_seconds=1.5)}

    assert rows["olga"].fast == 3


def test_long_approve_streaks_and_bulk_approvals_are_flagged(clock, operator2):
    task = make_task(clock, status=TaskStatus.AWAITING_APPROVAL)
    for i in range(20):
        gate = make_gate(clock, task, opened=T0, ordinal=i)
        decide(
            clock,
            actor=operator2,
            action="reviews.gate.approved",
            at=T0 + 10 * (i + 1) * S,
            gate=gate,
            bulk=i >= 8,
        )

    (otto,) = reviewer_quality(WEEK)

    assert otto.longest_approve_streak == 20
    assert otto.fast == 0
    assert otto.flags == [
        "20 approvals in a row without a rejection",
        "12 of 20 gate approvals made in bulk",
    ]


# -- audit outcomes ------------------------------------------------------------------------------


def audit_history(clock):
    task = make_task(clock)
    for status in ("ok", "ok", "flagged", "pending"):
        make_audit_item(clock, task, status=status)
    for status in ("flagged", "ok"):
        make_audit_item(clock, task, rule="read", route="auto", sampled=True, status=status)


def test_audit_outcomes_by_rule_and_lane(clock):
    audit_history(clock)

    rows = [(a.rule, a.lane, a.items, a.reviewed, a.flagged) for a in audit_outcomes(WEEK)]

    assert rows == [("read", "sampled auto", 2, 2, 1), ("small payment", "audit", 4, 3, 1)]
    figures = figures_collect(WEEK)
    assert figures.flag_rate_by_rule == {"read": 0.5, "small payment": pytest.approx(1 / 3)}


# -- the page and the command show the same figures ---------------------------------------------


def full_history(clock, operator, auditor):
    completion_history(clock)
    savings_history(clock)
    quality_history(clock, operator, auditor)
    audit_history(clock)
    load_history(clock)


def test_the_dashboard_page_shows_the_figures(clock, operator, auditor, policy_admin):
    full_history(clock, operator, auditor)
    url = reverse("reviews:dashboard") + "?date_from=2026-03-01&date_to=2026-03-07"

    response = client_for(auditor).get(url)
    admin_page = client_for(policy_admin).get(url).content.decode()

    assert response.status_code == 200
    page = response.content.decode()
    figures = response.context["f"]
    # 7 of 10 settled: 3 + 3 + 1 succeeded; stopped: authorization gap, budget, trip.
    assert figures.completion.rate == pytest.approx(0.7)
    assert 'data-figure="completion_rate">70.0%<' in page
    assert 'data-figure="tokens_saved_by_resume">365<' in page
    assert 'data-figure="decision_latency_p50_s">2.0 min<' in page
    assert 'data-person="olga"' in page and 'data-person="audrey"' in page
    assert '<svg class="bar"' in page
    # Flagged patterns are listed for an admin.
    assert "reviewer-flags" not in page
    assert "olga</strong>: 4 of 6 decisions in under 3 s" in admin_page


def test_the_dashboard_filters_by_agent(clock, operator, auditor):
    completion_history(clock)

    response = client_for(operator).get(
        reverse("reviews:dashboard"), {"date_from": "2026-03-01", "agent": "trip"}
    )

    assert response.context["f"].completion.tasks == 1
    assert response.context["f"].window.agent == "trip"


def test_report_json_prints_the_same_figures(clock, operator, auditor):
    full_history(clock, operator, auditor)
    out = StringIO()

    call_command("report", "--json", "--since", "2026-03-01", "--until", "2026-03-07", stdout=out)

    report = json.loads(out.getvalue())
    assert report["completion_rate"] == pytest.approx(0.7)
    assert report["tokens_saved_by_resume"] == 365
    assert report["decision_latency_p50_s"] == pytest.approx(120.0)
    olga = next(r for r in report["reviewers"] if r["person"] == "olga")
    assert olga["decisions"] == 6
    assert olga["fast_decisions"] == 4
    assert olga["median_seconds_to_decide"] == pytest.approx(1.5)
    assert report["flag_rate_by_rule"]["read"] == 0.5


def test_report_text_names_the_figures(clock, operator, auditor):
    full_history(clock, operator, auditor)
    out = StringIO()

    call_command("report", "--since", "2026-03-01", "--until", "2026-03-07", stdout=out)

    text = out.getvalue()
    assert "Completion rate: 70.0%" in text
    assert "saved by resume: 365" in text
    assert "olga: 6 decisions" in text
    assert "flagged: 4 of 6 decisions in under 3 s" in text


def test_the_navigation_links_the_dashboard_for_every_role(
    operator, auditor, policy_admin, django_user_model
):
    nobody = django_user_model.objects.create_user(username="nora", password="x")
    link = f'href="{reverse("reviews:dashboard")}"'

    for user in (operator, auditor, policy_admin):
        assert link in client_for(user).get(reverse("agentops:task_list")).content.decode()
    assert link not in client_for(nobody).get(reverse("agentops:task_list")).content.decode()
    assert client_for(nobody).get(reverse("reviews:dashboard")).status_code == 403
