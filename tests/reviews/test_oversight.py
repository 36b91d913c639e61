"""The oversight report against a record built by real runs (the runner and the simulated
services in this process, people deciding through the services): its counts per agent, the
Article each section evidences, and the same report from the page, its CSV and JSON, the API and
`manage.py report oversight`."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agentops.models import AuditItem
from agentops.states import AuditStatus, TaskStatus
from agentops.tokens import api_token_create
from reviews.oversight import EVIDENCES, oversight_report
from reviews.services import audit_item_review, gate_approve, gate_reject, task_control_apply
from reviews.services.stops import fleet_resume_apply, fleet_stop_apply
from tests.builders import refund, run_until_parked_or_done
from tests.reviews.builders import client_for, gated_refund, open_gate

pytestmark = pytest.mark.django_db


@pytest.fixture
def record(sim, redis_clean, operator, auditor, starter, django_user_model) -> dict[str, Any]:
    """Three refunds run for real: one through (its refund audited, then flagged by an
    auditor), one gated and approved, one gated and rejected (the agent asks again: a second
    gate, left open); one paused and resumed by the operator; a stop of every task made and
    lifted by a holder of the stop permission."""
    stella = django_user_model.objects.create_user("stella")
    stella.user_permissions.add(Permission.objects.get(codename="stop_fleet"))
    stella = django_user_model.objects.get(pk=stella.pk)

    through = run_until_parked_or_done(refund())
    assert through.status == TaskStatus.SUCCEEDED
    item = AuditItem.objects.filter(task=through).order_by("id").first()
    audit_item_review(item_id=item.pk, actor=auditor, verdict=AuditStatus.FLAGGED, note="odd")

    approved = gated_refund(created_by=starter, order_id="B2002")
    gate = open_gate(approved)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    assert run_until_parked_or_done(approved).status == TaskStatus.SUCCEEDED

    rejected = gated_refund(created_by=starter, order_id="B2002")
    gate = open_gate(rejected)
    gate_reject(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest, feedback="no")
    assert run_until_parked_or_done(rejected).status == TaskStatus.AWAITING_APPROVAL

    paused = refund()
    task_control_apply(task_id=paused.pk, action="pause", actor=operator, reason="look")
    task_control_apply(task_id=paused.pk, action="resume", actor=operator)
    made = fleet_stop_apply(scope="all", reason="incident 9", actor=stella)
    fleet_resume_apply(stop_id=made.stop.pk, reason="fine", actor=stella)
    assert run_until_parked_or_done(paused).status == TaskStatus.SUCCEEDED
    return {"stop": made.stop, "tasks": [through, approved, rejected, paused]}


def period() -> dict[str, Any]:
    now = timezone.now()
    return {"since": now - timedelta(hours=1), "until": now + timedelta(hours=1)}


def test_the_report_counts_what_people_oversaw_decided_overrode_and_stopped(record):
    report = oversight_report(**period())

    assert [a.agent for a in report.agents] == ["refund"]
    sections = report.agents[0].sections()
    overseen = sections["overseen"]
    # Three reads a task routed auto (12); the two ungated refunds and their emails audited,
    # the approved refund's email too (5); the two gated refund steps (2), the rejected one
    # routed again to a second gate (3 gates), its email never started (19 steps).
    steps = overseen["steps_by_lane"]
    assert sum(steps.values()) == overseen["steps"] == 19
    assert steps == {"audit": 5, "auto": 12, "gate": 2}
    assert overseen["gates_opened"] == 3
    # The audit lane's five, and the share of auto steps sampled for audit (chosen from the
    # step's id: how many depends on the ids the database gave).
    sampled = AuditItem.objects.filter(task__in=record["tasks"], sampled=True).count()
    assert overseen["audit_items_sampled_from_auto"] == sampled
    assert overseen["audit_items"] == 5 + sampled
    assert overseen["audit_items_reviewed"] == 1

    decisions = sections["decisions"]["by_person"]
    assert decisions == {
        "audrey": {"reviews.audit.flagged": 1},
        "olga": {
            "reviews.gate.approved": 1,
            "reviews.gate.rejected": 1,
            "reviews.task.paused": 1,
            "reviews.task.resumed": 1,
        },
        # The stop covered every task: its decisions name no task, so no agent's (below).
    }
    assert sections["decisions"]["gate_decision_p50_s"] is not None
    assert sections["overrides"] == {
        "aborted": 0,
        "edited": 0,
        "flagged": 1,
        "plan_repaired": 0,
        "rejected": 1,
        "rolled_back": 0,
        "skipped": 0,
    }
    bias = sections["automation_bias"]
    assert bias["approval_rate"] == pytest.approx(1 / 3)
    assert sorted(r["person"] for r in bias["reviewers"]) == ["audrey", "olga"]
    stops = sections["stops_and_anomalies"]
    assert [s["stop"] for s in stops["fleet_stops"]] == [record["stop"].pk]
    assert stops["fleet_stops"][0]["stopped_by"] == "stella"
    assert stops["fleet_stops"][0]["lifted_by"] == "stella"
    assert stops["task_pauses"] == 1
    assert stops["audit_flags"] == 1
    assert stops["stopped_for_a_person"] == {"tasks": 0, "stops": 0}
    assert sections["record"]["decisions_logged"] == 5
    assert sections["record"]["events_logged"] > 0


def test_each_section_says_what_of_the_act_it_evidences(record):
    body = oversight_report(**period()).as_dict()

    sections = body["agents"][0]["sections"]
    assert set(sections) == set(EVIDENCES)
    assert sections["stops_and_anomalies"]["evidences"].startswith("Art. 14(4)(e)")
    assert sections["automation_bias"]["evidences"].startswith("Art. 14(4)(b)")
    assert sections["record"]["evidences"].startswith("Art. 12")


def test_a_period_before_the_runs_reports_no_agent(record):
    earlier = timezone.now() - timedelta(days=3)
    assert oversight_report(since=earlier, until=earlier + timedelta(days=1)).agents == []


def test_the_page_its_csv_and_json_the_api_and_the_command_give_the_same_report(
    record, operator, monkeypatch
):
    today = timezone.localdate().isoformat()
    client = client_for(operator)
    page = client.get(reverse("reviews:oversight"), {"date_from": today, "date_to": today})
    assert page.status_code == 200
    text = page.content.decode()
    assert 'Agent <span translate="no">refund</span>' in text and "Art. 14(4)(e)" in text
    as_json = client.get(
        reverse("reviews:oversight"), {"date_from": today, "date_to": today, "format": "json"}
    ).json()
    as_csv = client.get(
        reverse("reviews:oversight"), {"date_from": today, "date_to": today, "format": "csv"}
    )
    assert as_csv["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.content.decode())))
    lanes = {r["figure"]: r["value"] for r in rows if r["section"] == "overseen"}
    assert lanes["steps_by_lane.gate"] == "2" and lanes["steps"] == "19"
    assert {r["agent"] for r in rows} == {"refund"}

    _, token = api_token_create(user=operator, name="tests")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get(
        "/api/v1/oversight", {"since": today, "until": today}
    )
    assert api.status_code == 200
    out = StringIO()
    call_command(
        "report", "oversight", "--since", today, "--until", today, "--format", "json", stdout=out
    )
    from_command = json.loads(out.getvalue())

    assert as_json == api.json() == from_command
    assert from_command["agents"][0]["sections"]["overseen"]["figures"]["steps"] == 19


def test_the_report_is_for_the_dashboards_readers(record, task_starter):
    assert client_for(task_starter).get(reverse("reviews:oversight")).status_code == 403
    _, token = api_token_create(user=task_starter, name="tests")
    today = timezone.localdate().isoformat()
    refused = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get(
        "/api/v1/oversight", {"since": today, "until": today}
    )
    assert refused.status_code == 403


def test_the_command_without_a_kind_still_prints_the_dashboards_figures(record):
    out = StringIO()
    call_command("report", "--json", stdout=out)
    assert "completion_rate" in json.loads(out.getvalue())
