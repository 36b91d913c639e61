"""Three-lane routing in the runner: the pinned policy version decides auto, audit, gate or deny;
gates park the task with no worker; a person's decision resumes it (approve, reject with
feedback, edit and approve), and the approval is checked again right before the call."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.engine.decisions import gates_expire_overdue
from agentops.engine.jsonvalues import REDACTED, redacted
from agentops.models import AuditItem, Event, Gate, Step, Task, ToolCall
from agentops.states import GateStatus, LedgerStatus, StepStatus, TaskStatus
from policies.engine import sampled
from policies.services import (
    policy_create,
    policy_draft_create,
    policy_publish,
    policy_rule_add,
    policy_version_ensure_active,
)
from reviews.models import Decision
from reviews.services import (
    GateAlreadyDecided,
    NotAllowed,
    gate_approve,
    gate_edit_and_approve,
    gate_reject,
)
from tests.builders import run_until_parked_or_done

pytestmark = pytest.mark.django_db

LARGE_ORDER = "B2002"  # 108 EUR: above the default policy's 100 EUR threshold


@pytest.fixture
def operator(django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username="olga", password="x")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="decide_gate"))
    return user


@pytest.fixture
def requester(django_user_model):
    return django_user_model.objects.create_user(username="rita", password="x")


def gated_refund(requester) -> tuple[Task, Gate]:
    task = task_create(
        agent="refund", goal="Refund B2002", input={"order_id": LARGE_ORDER}, created_by=requester
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.AWAITING_APPROVAL
    return task, Gate.objects.get(task=task, status=GateStatus.OPEN)


def custom_policy(name: str, rules: list[dict]) -> int:
    policy = policy_create(name=name)
    draft = policy_draft_create(policy=policy, author=None)
    for fields in rules:
        policy_rule_add(draft=draft, author=None, fields=fields)
    return policy_publish(draft=draft, author=None, change_note="test").number


def test_an_audited_call_commits_its_audit_item_naming_its_ledger_row(sim, redis_clean):
    # Reads in the audit lane: each is recorded by its step's one commit (the read-only path),
    # the side effects by their pending row's commit; the item names the row inserted with it.
    custom_policy(
        "all-audited",
        [
            {"name": "reads audited", "route": "audit", "side_effects": ["read"]},
            {"name": "default", "route": "audit", "is_default": True},
        ],
    )
    task = run_until_parked_or_done(
        task_create(
            agent="refund", goal="Refund", input={"order_id": "A1001"}, policy="all-audited"
        )
    )

    assert task.status == TaskStatus.SUCCEEDED
    calls = ToolCall.objects.filter(task=task)
    items = {item.tool_call_id: item for item in AuditItem.objects.filter(task=task)}
    assert len(calls) == 5 and set(items) == {call.pk for call in calls}
    for call in calls:
        item = items[call.pk]
        assert (item.step_id, item.tool, item.agent) == (call.step_id, call.tool, "refund")
        assert (item.route, item.sampled, item.status) == ("audit", False, "pending")
    # Both paths: read-only calls and calls with a side effect.
    assert {call.side_effect for call in calls} == {"read", "financial", "notify"}


def test_the_default_policy_routes_reads_auto_payments_audit_and_gates_large_ones(
    sim, redis_clean, requester
):
    small = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund A1001", input={"order_id": "A1001"})
    )
    assert small.status == TaskStatus.SUCCEEDED
    routes = dict(Step.objects.filter(task=small).values_list("ordinal", "route"))
    assert routes == {0: "auto", 1: "auto", 2: "auto", 3: "audit", 4: "audit"}
    items = AuditItem.objects.filter(task=small)
    sampled_reads = {
        s.pk for s in Step.objects.filter(task=small, route="auto") if sampled(0.05, str(s.pk))
    }
    assert {i.step_id for i in items if i.sampled} == sampled_reads
    assert sorted(i.tool for i in items if not i.sampled) == ["email_customer", "issue_refund"]
    assert (
        small.policy_version.number == Step.objects.get(task=small, ordinal=3).policy_version_number
    )

    task, gate = gated_refund(requester)
    assert gate.tool == "issue_refund" and gate.rule == "large payment"
    assert gate.arguments["amount"] == 108.0 and float(gate.amount) == 108.0
    assert task.lease_owner == "" and not ToolCall.objects.filter(step=gate.step).exists()
    assert Effect.objects.filter(service="payments").count() == 1  # only the small refund


def test_approving_a_gate_executes_the_call_once(sim, redis_clean, requester, operator):
    task, gate = gated_refund(requester)

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    with pytest.raises(GateAlreadyDecided):
        gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    call = ToolCall.objects.get(step=gate.step)
    assert call.args_digest == gate.args_digest and call.status == LedgerStatus.SUCCEEDED
    assert Decision.objects.filter(action="reviews.gate.approved").count() == 1


# Two threads, two connections: each must see the other's committed decision.
@pytest.mark.django_db(transaction=True)
def test_two_operators_deciding_at_once_make_one_decision(
    sim_server, redis_clean, requester, operator, django_user_model
):
    task, gate = gated_refund(requester)
    second = django_user_model.objects.create_user(username="omar", password="x")
    second.groups.set(operator.groups.all())
    second.user_permissions.set(operator.user_permissions.all())
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def decide(user) -> None:
        barrier.wait()
        try:
            gate_approve(gate_id=gate.pk, actor=user, seen_digest=gate.args_digest)
            outcomes.append("approved")
        except GateAlreadyDecided:
            outcomes.append("conflict")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=decide, args=(u,)) for u in (operator, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["approved", "conflict"]
    assert Decision.objects.filter(action="reviews.gate.approved").count() == 1
    assert run_until_parked_or_done(task).status == TaskStatus.SUCCEEDED
    assert ToolCall.objects.filter(step=gate.step).count() == 1


def test_the_person_who_started_the_task_cannot_approve_its_gate(
    sim, redis_clean, requester, operator
):
    _, gate = gated_refund(operator)

    with pytest.raises(NotAllowed, match="you started this task"):
        gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    with pytest.raises(NotAllowed, match="only members of 'operators'"):
        gate_approve(gate_id=gate.pk, actor=requester, seen_digest=gate.args_digest)
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_a_stale_view_of_the_action_cannot_approve_it(sim, redis_clean, requester, operator):
    _, gate = gated_refund(requester)

    with pytest.raises(GateAlreadyDecided, match="changed since you opened it"):
        gate_approve(gate_id=gate.pk, actor=operator, seen_digest="0" * 64)
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_rejecting_sends_feedback_to_the_agent_which_replans(
    sim, redis_clean, requester, operator, tmp_path, monkeypatch
):
    task, gate = gated_refund(requester)

    gate_reject(
        gate_id=gate.pk,
        actor=operator,
        seen_digest=gate.args_digest,
        feedback="Refund at most 80 without a manager.",
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(pk=gate.step_id)
    assert step.route == "audit" and step.policy_rule == "small payment"
    assert ToolCall.objects.get(step=step).args["amount"] == 80.0
    assert "Refund at most 80" in step.spec["notes"][0]
    assert Event.objects.get(task=task, action="agentops.step.rejected").actor == operator


def test_an_edited_action_is_evaluated_again(sim, redis_clean, requester, operator):
    task, gate = gated_refund(requester)
    edited = {**gate.arguments, "amount": 50.0}

    gate_edit_and_approve(
        gate_id=gate.pk,
        actor=operator,
        seen_digest=gate.args_digest,
        arguments=edited,
        reason="partial refund agreed",
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    call = ToolCall.objects.get(step=gate.step)
    assert call.args["amount"] == 50.0
    assert Step.objects.get(pk=gate.step_id).policy_rule == "small payment"
    decision = Decision.objects.get(action="reviews.gate.edited")
    assert decision.before_digest == gate.args_digest != decision.after_digest


def test_a_stricter_verdict_after_an_edit_gates_again(sim, redis_clean, requester, operator):
    custom_policy(
        "edits-reviewed",
        [
            {
                "name": "edited by a person",
                "route": "gate",
                "edited": True,
                "approver_group": "operators",
                "timeout_seconds": 600,
            },
            {
                "name": "large payment",
                "route": "gate",
                "side_effects": ["financial"],
                "amount_above": 100,
                "approver_group": "operators",
                "timeout_seconds": 600,
            },
            {"name": "default", "route": "auto", "is_default": True},
        ],
    )
    task = run_until_parked_or_done(
        task_create(
            agent="refund",
            goal="Refund",
            input={"order_id": LARGE_ORDER},
            created_by=requester,
            policy="edits-reviewed",
        )
    )
    first = Gate.objects.get(task=task, status=GateStatus.OPEN)
    assert first.rule == "large payment"

    gate_edit_and_approve(
        gate_id=first.pk,
        actor=operator,
        seen_digest=first.args_digest,
        arguments={**first.arguments, "amount": 90.0},
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.AWAITING_APPROVAL
    second = Gate.objects.get(task=task, status=GateStatus.OPEN)
    assert second.rule == "edited by a person" and second.edited
    assert second.arguments["amount"] == 90.0
    assert not ToolCall.objects.filter(step=first.step).exists()

    gate_approve(gate_id=second.pk, actor=operator, seen_digest=second.args_digest)
    assert run_until_parked_or_done(task).status == TaskStatus.SUCCEEDED
    assert Effect.objects.get(service="payments").request["amount"] == 90.0


def test_a_denied_action_stops_the_step_with_an_authorization_gap(sim, redis_clean):
    custom_policy(
        "no-refunds",
        [
            {"name": "refunds forbidden", "route": "deny", "tools": ["issue_refund"]},
            {"name": "default", "route": "auto", "is_default": True},
        ],
    )
    task = run_until_parked_or_done(
        task_create(agent="refund", goal="Refund", input={"order_id": "A1001"}, policy="no-refunds")
    )

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "authorization_gap"
    assert task.failure["detail"]["rule"] == "refunds forbidden"
    assert Step.objects.get(task=task, ordinal=3).status == StepStatus.FAILED
    assert not Effect.objects.filter(service="payments").exists()


def test_an_overdue_gate_takes_its_timeout_action(sim, redis_clean, requester):
    custom_policy(
        "escalating",
        [
            {
                "name": "large payment",
                "route": "gate",
                "side_effects": ["financial"],
                "amount_above": 100,
                "approver_group": "operators",
                "timeout_seconds": 60,
                "timeout_action": "escalate",
                "escalate_to": "finance",
            },
            {"name": "default", "route": "auto", "is_default": True},
        ],
    )
    task = run_until_parked_or_done(
        task_create(
            agent="refund", goal="Refund", input={"order_id": LARGE_ORDER}, policy="escalating"
        )
    )
    gate = Gate.objects.get(task=task)

    assert gates_expire_overdue(now=timezone.now() + timedelta(seconds=61)) == 1
    gate.refresh_from_db()
    assert gate.status == GateStatus.OPEN and gate.approver_group == "finance"

    assert gates_expire_overdue(now=timezone.now() + timedelta(seconds=3600)) == 1
    gate.refresh_from_db()
    assert gate.status == GateStatus.EXPIRED
    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED  # back to the agent, with the timeout as feedback
    assert "within" in Step.objects.get(pk=gate.step_id).spec["notes"][0]
    assert list(Decision.objects.order_by("id").values_list("action", flat=True)) == [
        "reviews.gate.escalated",
        "reviews.gate.expired",
    ]


@pytest.mark.django_db(transaction=True)
def test_publishing_while_steps_are_routed_changes_no_task_already_created(processes):
    pinned = policy_version_ensure_active()
    early = [
        task_create(agent="refund", goal=f"early {i}", input={"order_id": "A1001"})
        for i in range(6)
    ]
    processes.worker()
    processes.worker()
    draft = policy_draft_create(policy=pinned.policy, author=None)
    newer = policy_publish(draft=draft, author=None, change_note="republish while running")
    late = task_create(agent="refund", goal="late", input={"order_id": "A1001"})

    from tests.conftest import wait_for

    wait_for(
        lambda: Task.objects.filter(status=TaskStatus.SUCCEEDED).count() == 7,
        timeout=60,
        message="every task to finish",
    )
    for task in early:
        versions = set(
            Step.objects.filter(task=task).values_list("policy_version_number", flat=True)
        )
        assert versions == {pinned.number}
        assert Task.objects.get(pk=task.pk).policy_version_id == pinned.pk
    assert set(Step.objects.filter(task=late).values_list("policy_version_number", flat=True)) == {
        newer.number
    }


def test_secrets_are_redacted_before_they_are_stored():
    value = {
        "api_key": "abc123",
        "Authorization": "Bearer abcdefghijkl",
        "prompt_tokens": 12,
        "note": "use sk-abcdefghijklmnopqrstu or Bearer xyzxyzxyzxyz please",
        "nested": [{"password": "hunter2", "user": "ada"}],
    }
    clean = redacted(value)
    assert clean["api_key"] == clean["Authorization"] == REDACTED
    assert clean["prompt_tokens"] == 12 and clean["nested"][0] == {
        "password": REDACTED,
        "user": "ada",
    }
    assert clean["note"] == f"use {REDACTED} or {REDACTED} please"


def test_a_secret_in_a_tool_result_is_stored_redacted(sim, redis_clean):
    task = run_until_parked_or_done(
        task_create(
            agent="refund",
            goal="Refund",
            input={"order_id": "A1001", "reason": "token Bearer abcdefghijklmnop"},
        )
    )

    call = ToolCall.objects.get(task=task, tool="check_eligibility")
    assert "abcdefghijklmnop" not in str(call.args) + str(call.result)
    assert REDACTED in call.result["rule"]
    assert "abcdefghijklmnop" not in str(Step.objects.get(pk=call.step_id).model_response)
