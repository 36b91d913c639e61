"""The figures over history the real engine wrote: tasks run against the simulated services, a
gate decided and audit items reviewed through the services, a step retried after a 429."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.engine import task_create
from agentops.metrics import Window
from agentops.models import AuditItem, Event, Gate, Step
from agentops.states import TaskStatus
from reviews.calibration import confidence_bucket
from reviews.metrics import figures_collect
from reviews.services import audit_item_review, gate_approve
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import audited_refund, gated_refund, open_gate, stopped_trip

pytestmark = pytest.mark.django_db


def step_tokens(step: Step) -> int:
    usage = step.model_response["usage"]
    return usage["prompt_tokens"] + usage["completion_tokens"]


def test_figures_from_history_the_engine_wrote(sim, redis_clean, operator, auditor, starter):
    window = Window(
        since=timezone.now() - timedelta(hours=1), until=timezone.now() + timedelta(hours=1)
    )
    gated = gated_refund(created_by=starter)
    gate = open_gate(gated)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    assert run_until_parked_or_done(gated).status == TaskStatus.SUCCEEDED
    audited = audited_refund()
    refund_item = AuditItem.objects.get(task=audited, tool="issue_refund")
    email_item = AuditItem.objects.get(task=audited, tool="email_customer")
    audit_item_review(item_id=refund_item.pk, actor=auditor, verdict="flagged", note="too much")
    audit_item_review(item_id=email_item.pk, actor=auditor, verdict="ok")
    retried = run_until_parked_or_done(
        task_create(
            agent="refund",
            goal="Refund A1001 after a 429",
            input={"order_id": "A1001", "model_faults": {"1": ["429"]}},
        )
    )
    assert retried.status == TaskStatus.SUCCEEDED
    stopped_trip()

    f = figures_collect(window)

    assert (f.completion.tasks, f.completion.settled, f.completion.reached_last_step) == (4, 4, 3)
    assert f.completion.failure_kinds == {"authorization_gap": 1}
    assert f.completion.seed_modes == {"authorization gap": 1}
    failed_at = Event.objects.get(task=retried, action="agentops.step.failed").step_ordinal
    before = Step.objects.filter(task=retried, ordinal__lt=failed_at)
    assert f.savings.tokens_saved == sum(step_tokens(s) for s in before) > 0
    assert f.savings.tasks_resumed == 1
    decided = Gate.objects.get(pk=gate.pk)
    assert f.load.gates == 1
    assert f.load.latency_p50_s == pytest.approx(
        (decided.decided_at - decided.created_at).total_seconds()
    )
    people = {r.person: r for r in f.reviewers}
    assert (people["olga"].decisions, people["olga"].approval_rate) == (1, 1.0)
    assert (people["audrey"].decisions, people["audrey"].approval_rate) == (2, 0.5)
    assert f.flag_rate_by_rule[refund_item.rule] == 1.0
    assert f.flag_rate_by_rule[email_item.rule] == 0.0
    row = next(c for c in f.calibration if c.tool == "issue_refund")
    confidence = Step.objects.get(pk=refund_item.step_id).model_response.get("confidence")
    assert row.confidence["flagged"] == {confidence_bucket(confidence): 1}


def test_bulk_approvals_are_marked_in_the_log_and_counted(sim, redis_clean, operator, starter):
    from reviews.metrics import reviewer_quality
    from reviews.services import gates_bulk_approve

    window = Window(
        since=timezone.now() - timedelta(hours=1), until=timezone.now() + timedelta(hours=1)
    )
    gates = [open_gate(gated_refund(created_by=starter)) for _ in range(2)]
    single = open_gate(gated_refund(created_by=starter))
    gate_approve(gate_id=single.pk, actor=operator, seen_digest=single.args_digest)

    results = gates_bulk_approve(
        selection=[(g.pk, g.args_digest) for g in gates], actor=operator, reason="same refunds"
    )

    assert [r.outcome for r in results] == ["approved", "approved"]
    (olga,) = reviewer_quality(window)
    assert (olga.gate_approvals, olga.bulk) == (3, 2)
    assert olga.bulk_share == pytest.approx(2 / 3)
