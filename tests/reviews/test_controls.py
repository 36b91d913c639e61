"""Every waiting task can be stopped, and the workspace manages who works on what (issue 10,
items 9-12, 16): pause, resume, cancel and modify through services with a decision each; claims
that mean something (takeover, assignment, "mine"); inbox marks and filters; bulk audit review and
the decision log as CSV; the edit box's size limit; the admin goes through the services."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.urls import reverse

from agentops.engine import task_create
from agentops.models import AuditItem, Event, Gate, Task
from agentops.states import AuditStatus, GateStatus, TaskStatus
from reviews.models import Claim, Decision
from reviews.services import claim_take
from tests.builders import run_until_parked_or_done
from tests.factories import gated_refund_row, stopped_trip_row
from tests.reviews.builders import audited_refund, client_for, gated_refund, open_gate, stopped_trip

pytestmark = pytest.mark.django_db


def queued_refund(*, created_by: Any = None, **input_extra: Any) -> Task:
    return task_create(
        agent="refund",
        goal="Refund order A1001",
        input={"order_id": "A1001", **input_extra},
        created_by=created_by,
    )


def control(client: Any, task: Task, action: str, **data: Any) -> Any:
    return client.post(reverse(f"reviews:task_{action}", args=[task.pk]), data)


def test_pause_resume_cancel_a_queued_task_each_logged_once_and_replays_refused(
    sim, redis_clean, operator, starter
):
    task = queued_refund(created_by=starter)
    client = client_for(operator)

    assert control(client, task, "pause", reason="checking").status_code == 302
    assert Task.objects.get(pk=task.pk).status == TaskStatus.PAUSED
    replay = client.post(
        reverse("reviews:task_pause", args=[task.pk]), {"reason": "checking"}, follow=True
    )
    assert "Nothing changed" in replay.content.decode()
    assert control(client, task, "resume").status_code == 302
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED
    unconfirmed = client.post(reverse("reviews:task_cancel", args=[task.pk]), {}, follow=True)
    assert "tick the box" in unconfirmed.content.decode()
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED
    assert control(client, task, "cancel", confirm="on").status_code == 302
    assert Task.objects.get(pk=task.pk).status == TaskStatus.ABORTED
    control(client, task, "cancel", confirm="on")

    actions = list(Decision.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["reviews.task.paused", "reviews.task.resumed", "reviews.task.cancelled"]
    assert Decision.objects.get(action="reviews.task.paused").reason == "checking"


def test_a_paused_task_holds_no_worker_and_resumes_where_it_was(sim, redis_clean, operator):
    task = queued_refund()
    client = client_for(operator)
    control(client, task, "pause")

    assert run_until_parked_or_done(task).status == TaskStatus.PAUSED
    control(client, task, "resume")
    assert run_until_parked_or_done(task).status == TaskStatus.SUCCEEDED


def test_pausing_a_gated_task_withdraws_its_gate_and_resume_gates_again(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    client = client_for(operator)

    control(client, task, "pause")
    gate.refresh_from_db()
    assert gate.status == GateStatus.EXPIRED
    control(client, task, "resume")
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.AWAITING_APPROVAL
    assert Gate.objects.filter(task=task, status=GateStatus.OPEN).count() == 1


def test_the_task_page_offers_only_the_controls_its_status_allows(
    sim, redis_clean, operator, auditor
):
    task = queued_refund()
    page = client_for(operator).get(reverse("agentops:task_detail", args=[task.pk]))
    html = page.content.decode()
    assert 'id="pause-form"' in html and 'id="cancel-form"' in html
    assert 'id="resume-form"' not in html and 'id="modify-form"' in html
    assert (
        'id="task-controls"'
        not in client_for(auditor)
        .get(reverse("agentops:task_detail", args=[task.pk]))
        .content.decode()
    )


def test_modify_changes_budgets_and_editable_input_and_refuses_other_fields(
    sim, redis_clean, operator
):
    task = queued_refund()
    client = client_for(operator)
    control(client, task, "pause")

    refused = client.post(
        reverse("reviews:task_modify", args=[task.pk]),
        {"input": '{"order_id": "B2002"}'},
        follow=True,
    )
    assert "order_id may not be changed" in refused.content.decode()
    response = client.post(
        reverse("reviews:task_modify", args=[task.pk]),
        {"token_budget": "5000", "input": '{"amount": 20}', "reason": "customer asked for less"},
    )

    assert response.status_code == 302
    task.refresh_from_db()
    assert task.status == TaskStatus.PAUSED
    assert task.token_budget == 5000 and task.input["amount"] == 20
    decision = Decision.objects.get(action="reviews.task.modified")
    assert decision.before_digest != decision.after_digest
    assert set(decision.detail["changes"]) == {"token_budget", "input.amount"}
    assert Event.objects.filter(task=task, action="agentops.task.modified").count() == 1
    control(client, task, "resume")
    assert run_until_parked_or_done(task).status == TaskStatus.SUCCEEDED


def test_modifying_a_queued_task_pauses_and_resumes_it_through_the_transition_table(
    sim, redis_clean, operator
):
    task = queued_refund()
    client_for(operator).post(
        reverse("reviews:task_modify", args=[task.pk]), {"wall_time_budget_seconds": "600"}
    )

    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED and task.wall_time_budget_seconds == 600
    actions = list(Event.objects.filter(task=task).order_by("seq").values_list("action", flat=True))
    assert actions[-3:] == [
        "agentops.task.paused",
        "agentops.task.resumed",
        "agentops.task.modified",
    ]


def test_deciding_an_item_someone_else_holds_asks_to_take_it_over(
    sim, redis_clean, operator, operator2, starter
):
    gate = open_gate(gated_refund(created_by=starter))
    claim_take(task_id=gate.task_id, actor=operator2)
    client = client_for(operator)
    page = client.get(reverse("reviews:gate", args=[gate.pk])).content.decode()
    assert (
        'id="held-by-other"' in page and '<span translate="no">otto</span> holds this item' in page
    )

    refused = client.post(
        reverse("reviews:gate_approve", args=[gate.pk]), {"seen_digest": gate.args_digest}
    )
    assert refused.status_code == 409
    assert open_gate(gate.task) == gate
    taken = client.post(
        reverse("reviews:gate_approve", args=[gate.pk]),
        {"seen_digest": gate.args_digest, "take_over": "on"},
    )

    assert taken.status_code == 302
    assert Claim.objects.get(task_id=gate.task_id).user == operator
    actions = list(Decision.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["reviews.claim.taken_over", "reviews.gate.approved"]


def test_assign_to_a_colleague_who_then_sees_it_under_mine(
    sim, redis_clean, operator, operator2, starter
):
    task = gated_refund(created_by=starter)
    other = gated_refund(created_by=starter, order_id="E5005")

    response = client_for(operator).post(
        reverse("reviews:assign", args=[task.pk]), {"assignee": operator2.pk}
    )

    assert response.status_code == 302
    claim = Claim.objects.get(task=task)
    assert claim.user == operator2 and claim.assigned_by == operator
    assert Decision.objects.get().action == "reviews.claim.assigned"
    mine = client_for(operator2).get(reverse("reviews:inbox") + "?mine=on").content.decode()
    assert f'id="gate-{open_gate(task).pk}"' in mine
    assert f'id="gate-{open_gate(other).pk}"' not in mine


def test_gates_the_viewer_may_not_decide_are_marked_and_left_out_of_bulk_selection(
    sim, redis_clean, operator, starter
):
    own = open_gate(gated_refund(created_by=operator))
    theirs = open_gate(gated_refund(created_by=starter, order_id="E5005"))

    page = client_for(operator).get(reverse("reviews:inbox")).content.decode()

    assert f'id="select-gate-{theirs.pk}"' in page
    assert f'id="select-gate-{own.pk}"' not in page
    row = page[page.index(f'id="gate-{own.pk}"') :]
    assert "not yours to decide" in row[:2500] and f'id="claim-gate-{own.pk}"' not in row[:2500]


def test_inbox_filters_live_in_the_url_and_narrow_the_list(redis_clean, operator, starter):
    refund = gated_refund_row(created_by=starter)
    trip = stopped_trip_row(created_by=starter)
    client = client_for(operator)

    by_agent = client.get(reverse("reviews:inbox") + "?agent=trip").content.decode()
    assert f'id="task-{trip.pk}"' in by_agent and f"#{refund.pk}</a>" not in by_agent
    by_kind = client.get(reverse("reviews:inbox") + "?kind=gate").content.decode()
    assert f'id="task-{trip.pk}"' not in by_kind and f"#{refund.pk}</a>" in by_kind
    by_goal = client.get(reverse("reviews:inbox") + "?q=Lisbon").content.decode()
    assert f'id="task-{trip.pk}"' in by_goal and f"#{refund.pk}</a>" not in by_goal
    by_failure = client.get(reverse("reviews:inbox") + "?failure=authorization_gap")
    assert f'id="task-{trip.pk}"' in by_failure.content.decode()
    polled = client.get(reverse("reviews:inbox") + "?agent=trip", HTTP_HX_REQUEST="true")
    assert 'hx-get="/review/?agent=trip"' in polled.content.decode()


def test_the_inbox_shows_due_and_waiting_in_separate_columns(redis_clean, operator, starter):
    gated_refund_row(created_by=starter)
    stopped_trip_row(created_by=starter)

    page = client_for(operator).get(reverse("reviews:inbox")).content.decode()

    assert page.count('<td class="nowrap due">') == 2
    assert page.count('<td class="nowrap waiting">') == 2
    assert "then: escalate to operators" in page and "€108.00" in page


def test_bulk_mark_ok_in_the_audit_queue_is_post_redirect_get_and_logged_once(
    sim, redis_clean, auditor
):
    audited_refund()
    ids = list(AuditItem.objects.values_list("pk", flat=True))
    client = client_for(auditor)

    response = client.post(
        reverse("reviews:audit_bulk_review"), {"item": ids, "verdict": AuditStatus.OK}
    )
    client.post(reverse("reviews:audit_bulk_review"), {"item": ids, "verdict": AuditStatus.OK})

    assert response.status_code == 302
    assert set(AuditItem.objects.values_list("status", flat=True)) == {AuditStatus.OK}
    assert Decision.objects.filter(action="reviews.audit.ok").count() == len(ids)


def test_the_decision_log_exports_as_csv_with_formulas_defused(sim, redis_clean, operator, starter):
    gate = open_gate(gated_refund(created_by=starter))
    client = client_for(operator)
    client.post(
        reverse("reviews:gate_reject", args=[gate.pk]),
        {"seen_digest": gate.args_digest, "feedback": "=HYPERLINK(1)"},
    )

    response = client.get(reverse("reviews:decisions_csv") + "?action=reviews.gate")

    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["action"] for r in rows] == ["reviews.gate.rejected"]
    assert rows[0]["reason"] == "'=HYPERLINK(1)" and rows[0]["actor"] == "olga"
    assert (rows[0]["channel"], rows[0]["api_token"]) == ("browser", "")


def test_a_cut_paste_is_too_large_not_invalid_json(sim, redis_clean, operator, starter):
    gate = open_gate(gated_refund(created_by=starter))
    client = client_for(operator)
    page = client.get(reverse("reviews:gate", args=[gate.pk])).content.decode()
    edit_box = page[page.index('id="edit_arguments"') - 300 :][:600]
    assert "maxlength" not in edit_box and "At most 64 KB" in page

    response = client.post(
        reverse("reviews:gate_edit", args=[gate.pk]),
        {"seen_digest": gate.args_digest, "arguments": '{"note": "' + "x" * 70_000 + '"}'},
    )

    assert response.status_code == 400
    assert "Too large: 70,012 characters" in response.content.decode()
    assert "not valid JSON" not in response.content.decode()


def test_admin_budget_edits_go_through_the_service_and_never_save_the_row(
    sim, redis_clean, admin_client, admin_user
):
    task = queued_refund()
    Task.objects.filter(pk=task.pk).update(tokens_used=123)

    url = reverse("admin:agentops_task_change", args=[task.pk])
    data = {"token_budget": "999", "cost_budget": "", "wall_time_budget_seconds": ""}
    for inline in admin_client.get(url).context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        data.update({management.add_prefix(k): v for k, v in management.initial.items()})
        for form in formset.forms:
            data[form.add_prefix("id")] = form.instance.pk
            data[form.add_prefix("task")] = task.pk

    response = admin_client.post(url, data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    task.refresh_from_db()
    assert task.token_budget == 999 and task.tokens_used == 123
    assert Decision.objects.get().action == "reviews.task.modified"


def test_a_stopped_task_past_its_sla_is_escalated_once_and_released(
    sim, redis_clean, operator, starter
):
    from datetime import timedelta

    from django.utils import timezone

    from reviews.selectors import stopped_sla_seconds
    from reviews.services import stopped_tasks_escalate_overdue

    task = stopped_trip(created_by=starter)
    claim_take(task_id=task.pk, actor=operator)
    later = timezone.now() + timedelta(seconds=stopped_sla_seconds() + 60)

    assert stopped_tasks_escalate_overdue(now=timezone.now()) == 0
    assert stopped_tasks_escalate_overdue(now=later) == 1
    assert stopped_tasks_escalate_overdue(now=later) == 0

    assert not Claim.objects.filter(task=task).exists()
    decision = Decision.objects.get(action="reviews.task.escalated")
    assert decision.detail["released_from"] == "olga" and decision.task_id_ref == task.pk


def test_confirming_an_unknown_call_someone_else_holds_asks_to_take_it_over(
    sim, redis_clean, operator, operator2, starter, settings
):
    from agentops.models import ToolCall
    from tests.reviews.builders import unknown_refund

    task = unknown_refund(settings, created_by=starter)
    call = ToolCall.objects.get(task=task, tool="issue_refund_legacy")
    claim_take(task_id=task.pk, actor=operator2)
    client = client_for(operator)
    url = reverse("reviews:call_confirm", args=[task.pk, call.pk])

    refused = client.post(url, {"executed": "yes"})
    assert (
        refused.status_code == 409 and "otto is already working on this" in refused.content.decode()
    )
    assert client.post(url, {"executed": "yes", "take_over": "on"}).status_code == 302

    actions = list(Decision.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["reviews.claim.taken_over", "reviews.ledger.confirmed"]


def test_an_empty_task_list_says_when_tasks_exist_that_the_role_may_not_see(starter, policy_admin):
    task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})

    page = client_for(policy_admin).get(reverse("agentops:task_list")).content.decode()

    assert "No tasks you can see." in page and "No tasks yet." not in page


def test_a_cancelled_task_reads_cancelled_and_an_aborted_one_aborted(
    sim, redis_clean, operator, starter
):
    cancelled = queued_refund(created_by=starter)
    client = client_for(operator)
    assert control(client, cancelled, "cancel", confirm="on").status_code == 302
    stopped = stopped_trip(created_by=starter)
    aborted = client.post(
        reverse("reviews:intervention", args=[stopped.pk]), {"action": "abort", "confirmed": "True"}
    )
    assert aborted.status_code == 302

    def badge(task: Task) -> str:
        page = client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()
        return page.split("<dt>Status</dt>", 1)[1].split("</dd>", 1)[0]

    assert Task.objects.get(pk=cancelled.pk).status == TaskStatus.ABORTED  # stored value kept
    assert "Cancelled" in badge(cancelled) and "Aborted" not in badge(cancelled)
    assert "Aborted" in badge(stopped) and "Cancelled" not in badge(stopped)


def test_a_finished_task_shows_read_only_in_the_admin(redis_clean, admin_client):
    task = run_until_parked_or_done(task_create(agent="bench_noop", goal="done", input={}))
    assert task.status == TaskStatus.SUCCEEDED
    url = reverse("admin:agentops_task_change", args=[task.pk])

    page = admin_client.get(url)
    refused = admin_client.post(url, {"token_budget": "999"})

    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="_save"' not in html and 'name="token_budget"' not in html
    assert "View task" in html
    assert refused.status_code == 403
    assert Task.objects.get(pk=task.pk).token_budget is None
