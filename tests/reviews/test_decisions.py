"""The decision log: every kind of human decision in one filterable list, per task on the task
page, and append-only in PostgreSQL."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.urls import reverse
from django.utils import timezone

from agentops.models import AuditItem
from agentops.tokens import api_token_create
from policies.models import Policy
from policies.services import policy_draft_create, policy_publish
from reviews.models import Decision
from reviews.services import audit_item_review, decision_record, gate_approve, intervention_apply
from reviews.states import VIA_BROWSER, DecisionChannel
from tests.factories import stopped_trip_row
from tests.reviews.builders import (
    audited_refund,
    client_for,
    decisions_logged,
    gated_refund,
    open_gate,
    stopped_trip,
)

pytestmark = pytest.mark.django_db


def logged_actions(page: str) -> list[str]:
    return re.findall(r'<span data-action="((?:reviews|policies)\.[a-z_.]+)">', page)


@pytest.fixture
def decisions(sim, redis_clean, operator, auditor, policy_admin, starter) -> dict[str, Any]:
    gated = gated_refund(created_by=starter)
    gate = open_gate(gated)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest, reason="ok")
    trip = stopped_trip(created_by=starter)
    intervention_apply(task_id=trip.pk, action="abort", actor=operator, reason="not needed")
    audited_refund()
    item = AuditItem.objects.filter(tool="issue_refund").get()
    audit_item_review(item_id=item.pk, actor=auditor, verdict="ok")
    draft = policy_draft_create(policy=Policy.objects.get(name="default"), author=policy_admin)
    policy_publish(draft=draft, author=policy_admin, change_note="tighten refunds")
    return {"gated": gated, "trip": trip}


def test_the_log_lists_gate_intervention_audit_and_policy_decisions_newest_first(
    decisions, policy_admin
):
    page = client_for(policy_admin).get(reverse("reviews:decisions")).content.decode()

    actions = logged_actions(page)
    # The shipped default policy was published by the system when the first task pinned it.
    assert actions == [
        "policies.version.published",
        "reviews.audit.ok",
        "reviews.intervention.abort",
        "reviews.gate.approved",
        "policies.version.published",
    ]
    assert "tighten refunds" in page and "paula" in page and "not needed" in page


def test_the_log_filters_by_action_user_task_and_date(decisions, auditor):
    client = client_for(auditor)

    def actions(**params: Any) -> list[str]:
        return logged_actions(client.get(reverse("reviews:decisions"), params).content.decode())

    today = timezone.now().date()
    assert actions(action="reviews.gate") == ["reviews.gate.approved"]
    assert actions(action="reviews.intervention.abort") == ["reviews.intervention.abort"]
    assert actions(action="policies.version", user="paula") == ["policies.version.published"]
    assert actions(user="audrey") == ["reviews.audit.ok"]
    assert actions(task=decisions["trip"].pk) == ["reviews.intervention.abort"]
    assert len(actions(date_from=today.isoformat(), date_to=today.isoformat())) == 5
    assert actions(date_from=(today + timedelta(days=1)).isoformat()) == []


def test_the_htmx_filter_answers_with_the_table_only(decisions, operator):
    response = client_for(operator).get(
        reverse("reviews:decisions"), {"action": "reviews.gate"}, HTTP_HX_REQUEST="true"
    )

    fragment = response.content.decode().strip()
    assert fragment.startswith('<section id="decision-table"') and "<html" not in fragment
    assert logged_actions(fragment) == ["reviews.gate.approved"]


def test_the_task_page_shows_its_decisions_and_the_panel_to_open(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    client = client_for(operator)

    waiting = client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()
    gate_approve(
        gate_id=gate.pk,
        actor=operator,
        seen_digest=gate.args_digest,
        reason="fine",
        via=VIA_BROWSER,
    )
    decided = client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()

    assert f'href="/review/gates/{gate.pk}">Open the gate panel' in waiting
    assert "No human decisions on this task yet." in waiting
    assert logged_actions(decided) == ["reviews.gate.approved"]
    assert "Open the gate panel" not in decided
    assert f'href="/review/decisions?task={task.pk}"' in decided
    # Each row says how the decision came in, as the decision log does.
    assert re.search(r'<td class="nowrap small channel">\s*Browser\s*</td>', decided)


def test_a_stopped_task_page_links_to_its_recovery_panel(redis_clean, operator, django_user_model):
    task = stopped_trip_row()
    plain = django_user_model.objects.create_user(username="pat", password="pw-for-tests")

    page = client_for(operator).get(reverse("agentops:task_detail", args=[task.pk]))
    hidden = client_for(plain).get(reverse("agentops:task_detail", args=[task.pk]))

    assert (
        f'href="/review/tasks/{task.pk}/recover">Open the recovery panel' in page.content.decode()
    )
    assert 'id="review-heading"' not in hidden.content.decode()


def test_the_database_refuses_to_update_or_delete_a_decision(db, operator):
    decision = decision_record(
        action="reviews.gate.approved",
        actor=operator,
        subject="gate 1",
        reason="original",
        via=VIA_BROWSER,
    )

    for sql in (
        "UPDATE reviews_decision SET reason = 'rewritten' WHERE id = %s",
        "DELETE FROM reviews_decision WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, [decision.pk])
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Decision.objects.filter(pk=decision.pk).delete()

    decision.refresh_from_db()
    assert decision.reason == "original"
    assert Decision.objects.count() == 1


def test_the_log_and_its_csv_say_how_each_decision_came_in(db, operator):
    token, _ = api_token_create(user=operator, name="chat bot")
    for label, channel, token_id in [
        ("by-page", DecisionChannel.BROWSER, None),
        ("by-token", DecisionChannel.API, token.pk),
        ("by-gone-token", DecisionChannel.API, 999_999),
        ("by-sweeper", DecisionChannel.SYSTEM, None),
        ("from-before", DecisionChannel.UNKNOWN, None),
    ]:
        decisions_logged(count=1, actor_label=label, channel=channel, api_token_id=token_id)
    client = client_for(operator)

    page = client.get(reverse("reviews:decisions")).content.decode()
    body = b"".join(client.get(reverse("reviews:decisions_csv")).streaming_content)
    rows = {row["actor"]: row for row in csv.DictReader(io.StringIO(body.decode()))}

    cells = re.findall(r'<td class="nowrap small channel">([^<]+)</td>', page)
    assert sorted(cells) == sorted(
        [
            "Browser",
            f"API, token {token.prefix} (#{token.pk})",
            "API, token #999999",
            "System",
            "Unknown",
        ]
    )
    assert {actor: (row["channel"], row["api_token"]) for actor, row in rows.items()} == {
        "by-page": ("browser", ""),
        "by-token": ("api", f"{token.prefix} (#{token.pk})"),
        "by-gone-token": ("api", "#999999"),
        "by-sweeper": ("system", ""),
        "from-before": ("unknown", ""),
        **{actor: ("", "") for actor, row in rows.items() if row["action"].startswith("policies.")},
    }
    assert 'id="decisions-csv-excel"' in page and "excel=1" in page
