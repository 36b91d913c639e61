"""Two-person approval (four eyes): a policy rule with `approvals_required = 2` opens a gate of
the `two_approvers` kind; two different people (neither the starter), one of them of the second
group, must approve the same arguments; an edit between them starts over; a rejection by either
ends it; the panel, the inbox, bulk approval, the API and the notifications follow.

Gates are opened by the real runner against the in-process simulated services (rollback-isolated);
decisions go through the services, the views and the API, and the runner then counts what ran.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils.html import escape
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentops.dev.people import FINANCE_LEADS, four_eyes_policy_ensure
from agentops.engine import (
    Choice,
    DecisionRefused,
    GateDecision,
    TwoApprovers,
    gate_decide,
    task_create,
)
from agentops.engine.approvals import approval_kind_for
from agentops.models import Gate
from agentops.states import GateStatus, TaskStatus
from agentops.tokens import api_token_create
from policies.engine import GateSettings
from reviews.models import Claim, Decision, Delivery
from reviews.notifications import notices_find
from reviews.roles import gate_decider_refusal
from reviews.services import (
    GateAlreadyDecided,
    NotAllowed,
    gate_approve,
    gate_edit_and_approve,
    gate_reject,
    gates_bulk_approve,
)
from reviews.states import NoticeEvent
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import client_for, effects, open_gate
from tests.reviews.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def fiona(groups: Any, django_user_model: Any) -> Any:
    """An operator who is also a finance lead (the second group of the four-eyes rule)."""
    Group.objects.get_or_create(name=FINANCE_LEADS)
    return make_user(django_user_model, "fiona", "operators", FINANCE_LEADS)


def four_eyes_gate(*, starter: Any, author: Any, order_id: str = "B2002") -> Gate:
    """A 108 EUR refund under the `four-eyes` policy, parked at its two-person gate."""
    policy = four_eyes_policy_ensure(author=author)
    task = task_create(
        agent="refund",
        goal=f"Refund {order_id}",
        input={"order_id": order_id},
        created_by=starter,
        policy=policy,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.AWAITING_APPROVAL
    return open_gate(task)


def approvers(gate: Gate) -> list[str]:
    gate.refresh_from_db()
    return [a.by for a in TwoApprovers().approvals_of(gate)]


def test_a_rule_wanting_two_approvals_opens_a_gate_of_the_two_approvers_kind(
    sim, redis_clean, starter, fiona
):
    gate = four_eyes_gate(starter=starter, author=fiona)

    assert (gate.approval_kind, gate.approver_group, gate.second_approver_group) == (
        "two_approvers",
        "operators",
        FINANCE_LEADS,
    )
    assert gate.rule == "large payment" and gate.approvals == []
    assert approval_kind_for(GateSettings(approvals_required=2)) == "two_approvers"
    assert approval_kind_for(GateSettings()) == "one_approver"


def test_the_first_approval_leaves_the_gate_open_at_1_of_2_and_nothing_runs(
    sim, redis_clean, operator, starter, fiona
):
    gate = four_eyes_gate(starter=starter, author=fiona)

    decided = gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    gate.refresh_from_db()
    assert not decided.closed and (len(decided.approvals), decided.required) == (1, 2)
    assert (gate.status, gate.task.status) == (GateStatus.OPEN, TaskStatus.AWAITING_APPROVAL)
    assert approvers(gate) == ["olga"] and gate.approvals[0]["group"] == "operators"
    assert TwoApprovers().waiting_for(gate) == (FINANCE_LEADS,)
    assert effects("payments", "refund") == 0
    logged = Decision.objects.get(task_id_ref=gate.task_id)
    assert (logged.action, logged.detail["approval"], logged.detail["of"]) == (
        "reviews.gate.approved",
        1,
        2,
    )


def test_the_second_approval_by_another_person_of_the_second_group_runs_the_action_once(
    sim, redis_clean, operator, starter, fiona
):
    gate = four_eyes_gate(starter=starter, author=fiona)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    decided = gate_approve(gate_id=gate.pk, actor=fiona, seen_digest=gate.args_digest)
    task = run_until_parked_or_done(gate.task)

    gate.refresh_from_db()
    assert decided.closed and [a.by for a in decided.approvals] == ["olga", "fiona"]
    # The gate keeps the closing approval too, with the group it counted for.
    assert [(a["by"], a["group"]) for a in gate.approvals] == [
        ("olga", "operators"),
        ("fiona", FINANCE_LEADS),
    ]
    assert (gate.status, gate.decided_by, task.status) == (
        GateStatus.APPROVED,
        fiona,
        TaskStatus.SUCCEEDED,
    )
    assert effects("payments", "refund") == 1
    assert list(
        Decision.objects.filter(task_id_ref=gate.task_id)
        .order_by("id")
        .values_list("actor_label", "detail__approval")
    ) == [("olga", 1), ("fiona", 2)]


def test_nobody_approves_twice_not_the_starter_and_the_second_comes_from_the_second_group(
    sim, redis_clean, operator, operator2, starter, fiona, django_user_model
):
    gate = four_eyes_gate(starter=starter, author=fiona)
    root = django_user_model.objects.create_superuser("root", password="pw-for-tests")

    with pytest.raises(NotAllowed, match="you started this task"):
        gate_approve(gate_id=gate.pk, actor=starter, seen_digest=gate.args_digest)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    gate.refresh_from_db()

    with pytest.raises(NotAllowed, match="you approved this already"):
        gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    assert gate_decider_refusal(gate, operator2) == (
        "only members of 'finance leads' may decide the second approval"
    )
    # The engine refuses a repeat whatever the caller checked (no check at all here).
    with pytest.raises(DecisionRefused, match="approved this already"):
        gate_decide(
            gate_id=gate.pk,
            decision=GateDecision(Choice.APPROVE),
            actor=operator,
            seen_digest=gate.args_digest,
        )
    # A superuser may stand in for any group, but counts once too.
    gate_approve(gate_id=gate.pk, actor=root, seen_digest=gate.args_digest)
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and gate.decided_by == root


def test_an_edit_between_the_approvals_starts_over_and_a_stale_tab_is_refused(
    sim, redis_clean, operator, starter, fiona
):
    gate = four_eyes_gate(starter=starter, author=fiona)
    proposed = gate.args_digest
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=proposed)

    edited = {**gate.arguments, "amount": 104.0}
    decided = gate_edit_and_approve(
        gate_id=gate.pk, actor=fiona, seen_digest=proposed, arguments=edited, reason="cap"
    )

    gate.refresh_from_db()
    assert not decided.closed and gate.status == GateStatus.OPEN
    assert (gate.arguments["amount"], gate.edited, approvers(gate)) == (104.0, True, ["fiona"])
    assert gate.approvals[0]["group"] == FINANCE_LEADS
    with pytest.raises(GateAlreadyDecided, match="changed since you opened it"):
        gate_approve(gate_id=gate.pk, actor=operator, seen_digest=proposed)

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    task = run_until_parked_or_done(gate.task)

    assert task.status == TaskStatus.SUCCEEDED and effects("payments", "refund") == 1
    assert task.tool_calls.get(tool="issue_refund").args["amount"] == 104.0
    edit_log = Decision.objects.get(task_id_ref=gate.task_id, action="reviews.gate.edited")
    assert edit_log.detail["started_over"] is True
    assert edit_log.detail["proposed"]["amount"] == 108.0


def test_a_rejection_by_either_ends_it(sim, redis_clean, operator, starter, fiona):
    gate = four_eyes_gate(starter=starter, author=fiona)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    gate_reject(gate_id=gate.pk, actor=fiona, seen_digest=gate.args_digest, feedback="too much")

    gate.refresh_from_db()
    assert gate.status == GateStatus.REJECTED and gate.decided_by == fiona
    assert effects("payments", "refund") == 0


def test_the_first_approver_lets_go_of_the_item_so_the_second_needs_no_takeover(
    sim, redis_clean, operator, starter, fiona
):
    gate = four_eyes_gate(starter=starter, author=fiona)
    Claim.objects.create(task_id=gate.task_id, user=operator)

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    assert not Claim.objects.filter(task_id=gate.task_id).exists()
    gate_approve(gate_id=gate.pk, actor=fiona, seen_digest=gate.args_digest)


def test_bulk_approval_counts_as_the_first_of_two(sim, redis_clean, operator, starter, fiona):
    gate = four_eyes_gate(starter=starter, author=fiona)

    [result] = gates_bulk_approve(selection=[(gate.pk, gate.args_digest)], actor=operator)

    assert (result.outcome, result.message) == (
        "1 of 2 approvals",
        "approved by you; a second person must approve too",
    )
    assert approvers(gate) == ["olga"]


def test_the_panel_and_the_inbox_show_1_of_2_and_who_approved(
    sim, redis_clean, operator, starter, fiona
):
    gate = four_eyes_gate(starter=starter, author=fiona)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    olga_panel = client_for(operator).get(reverse("reviews:gate", args=[gate.pk]))
    fiona_panel = client_for(fiona).get(reverse("reviews:gate", args=[gate.pk]))
    inbox = client_for(fiona).get(reverse("reviews:inbox"), HTTP_HX_REQUEST="true")

    page = olga_panel.content.decode()
    assert '<span id="approvals-count">1 of 2</span>' in page
    assert 'approved by <strong translate="no">olga</strong>' in page
    assert "You cannot decide this gate: you approved this already" in page
    assert 'a second person of <strong><span translate="no">finance leads</span></strong>' in page
    assert "decide-refusal" not in fiona_panel.content.decode()
    assert (
        '1 of 2 approvals</strong> · by <span translate="no">olga</span> · next: '
        '<span translate="no">finance leads</span>'
    ) in inbox.content.decode()


def test_the_views_keep_roles_and_csrf(sim, redis_clean, operator, auditor, starter, fiona):
    gate = four_eyes_gate(starter=starter, author=fiona)
    url = reverse("reviews:gate_approve", args=[gate.pk])
    body = {"seen_digest": gate.args_digest}

    no_token = client_for(operator, enforce_csrf_checks=True).post(url, body)
    reader = client_for(auditor).post(url, body)
    own = client_for(starter).post(url, body)
    first = client_for(operator).post(url, body)
    again = client_for(operator).post(url, body)

    assert [no_token.status_code, reader.status_code, own.status_code] == [403, 403, 403]
    assert [first.status_code, again.status_code] == [302, 403]
    assert "you approved this already" in again.content.decode()
    assert approvers(gate) == ["olga"]


def test_the_api_shows_the_count_and_decides_like_the_panel(
    sim, redis_clean, operator, auditor, starter, fiona
):
    gate = four_eyes_gate(starter=starter, author=fiona)
    _, olga = api_token_create(user=operator, name="t")
    _, audrey = api_token_create(user=auditor, name="t")
    path = f"/api/v1/gates/{gate.pk}/approve"
    body = {"seen_digest": gate.args_digest}

    def post(token: str) -> Any:
        return client_for(operator).post(
            path, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
        )

    refused = post(audrey)
    first = post(olga)
    again = post(olga)
    decisions = client_for(operator).get(
        f"/api/v1/tasks/{gate.task_id}/decisions", HTTP_AUTHORIZATION=f"Bearer {olga}"
    )

    assert [refused.status_code, first.status_code, again.status_code] == [403, 200, 403]
    shown = first.json()
    assert (shown["status"], shown["approval_kind"], shown["approvals_required"]) == (
        "open",
        "two_approvers",
        2,
    )
    assert [a["by"] for a in shown["approvals"]] == ["olga"]
    assert shown["waiting_for"] == [FINANCE_LEADS]
    assert [(d["action"], d["actor"], d["channel"]) for d in decisions.json()] == [
        ("reviews.gate.approved", "olga", "api")
    ]


def test_the_second_group_is_told_once_per_proposal_and_not_who_approved(
    sim, redis_clean, operator, starter, fiona, django_user_model
):
    gate = four_eyes_gate(starter=starter, author=fiona)
    for user in (operator, starter, fiona):
        user.email = f"{user.username}@example.com"
        user.save()
    notices_find()

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    first = [n for n in notices_find() if n.event == NoticeEvent.GATE_SECOND_APPROVAL]
    again = notices_find()

    assert len(first) == 1 and again == []
    told = Delivery.objects.filter(notice=first[0]).values_list("user__username", flat=True)
    assert list(told) == ["fiona"]
    assert "1 of 2 approvals (by olga)" in first[0].text


names = st.text(min_size=1, max_size=60).filter(lambda text: text.strip() and "\x00" not in text)


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(by="<script>alert(1)</script>", group='" hx-get="/x')
@example(by="{{7*7}}", group="<b>leads</b>")
@given(by=names, group=names)
def test_any_approver_name_and_group_render_as_text_on_the_panel_the_inbox_and_the_api(
    sim, redis_clean, operator, starter, fiona, by: str, group: str
):
    gate = Gate.objects.filter(approval_kind="two_approvers", status=GateStatus.OPEN).first()
    if gate is None:
        gate = four_eyes_gate(starter=starter, author=fiona)
    kept = {"by": by, "user_id": None, "args_digest": gate.args_digest, "at": "", "group": group}
    Gate.objects.filter(pk=gate.pk).update(approvals=[kept], second_approver_group=group)
    _, token = api_token_create(user=operator, name="t")

    panel = client_for(fiona).get(reverse("reviews:gate", args=[gate.pk])).content.decode()
    inbox = client_for(fiona).get(reverse("reviews:inbox"), HTTP_HX_REQUEST="true")
    api = client_for(operator).get(f"/api/v1/gates/{gate.pk}", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert f'approved by <strong translate="no">{escape(by)}</strong>' in panel
    assert f'by <span translate="no">{escape(by)}</span> · next:' in inbox.content.decode()
    for page in (panel, inbox.content.decode()):
        assert "<script>alert" not in page and 'hx-get="/x' not in page
    assert [a["by"] for a in api.json()["approvals"]] == [by]
