"""Scopes end to end in the engine: the simulated services refuse a scoped token that lacks an
endpoint's scope and name it (RFC 6750), the tools carry the agent's scopes and the grants in
force, the advisor recommends granting the named scope, and a grant continues the refused step
alone (same key), until it expires or is revoked."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.engine.advisor import Action, Situation, advise
from agentops.engine.errors import TransitionRefused
from agentops.engine.grants import GrantRefused, scope_grant, scope_grant_revoke
from agentops.engine.recovery import intervention_recovery
from agentops.engine.registry import get_agent
from agentops.engine.scopes import scopes_held
from agentops.models import Event, ScopeGrant, Task, ToolCall
from agentops.states import LedgerStatus, TaskStatus
from tests.builders import run_until_parked_or_done
from tests.simulated import BASE_URL, sim_client

pytestmark = pytest.mark.django_db

CREDIT = {"order_id": "A1010", "amount": 10, "currency": "EUR"}


def goodwill(**input_overrides) -> Task:
    return task_create(
        agent="goodwill",
        goal="Credit order A1010",
        input={"order_id": "A1010", "amount": 10, **input_overrides},
    )


def stopped_goodwill() -> Task:
    task = run_until_parked_or_done(goodwill())
    assert task.status == TaskStatus.NEEDS_ATTENTION, task.failure
    return task


@pytest.fixture
def person(django_user_model):
    return django_user_model.objects.create_user("grace")


def test_the_sim_refuses_a_scoped_token_without_the_endpoint_s_scope_and_names_it(sim):
    with sim_client(5) as client:
        refused = client.post(
            f"{BASE_URL}/payments/credit",
            json=CREDIT,
            headers={"Idempotency-Key": "k1", "X-OAuth-Scopes": "orders:lookup email:send"},
        )
        allowed = client.post(
            f"{BASE_URL}/payments/credit",
            json=CREDIT,
            headers={"Idempotency-Key": "k2", "X-OAuth-Scopes": "payments:credit"},
        )
        unscoped = client.post(
            f"{BASE_URL}/payments/credit", json=CREDIT, headers={"Idempotency-Key": "k3"}
        )

    assert refused.status_code == 403
    assert refused.headers["WWW-Authenticate"] == (
        'Bearer error="insufficient_scope", scope="payments:credit"'
    )
    assert refused.json()["required_scope"] == "payments:credit"
    assert allowed.status_code == 200 and unscoped.status_code == 200
    assert sorted(Effect.objects.values_list("request_key", flat=True)) == ["k2", "k3"]


def test_a_refusal_stops_the_task_naming_the_scope_and_the_advisor_recommends_the_grant(sim):
    task = stopped_goodwill()

    assert task.failure["kind"] == "authorization_gap"
    assert task.failure["detail"]["missing_scope"] == "payments:credit"
    recovery = intervention_recovery(task)
    assert recovery.recommendation.action == Action.GRANT
    assert recovery.recommendation.rule == "missing-scope"
    assert "payments:credit" in recovery.recommendation.rationale
    assert recovery.recommendation.options[:2] == (Action.GRANT, Action.RETRY)
    assert recovery.previews["grant"].summary.startswith("Grants the missing scope, then runs")
    assert Effect.objects.filter(service="payments").count() == 0


def test_a_refusal_without_a_named_scope_keeps_the_old_advice():
    unnamed = Situation(kind="authorization_gap", layer="tool", side_effect="write")
    named = Situation(
        kind="authorization_gap", layer="tool", side_effect="write", missing_scope="hotels:book"
    )

    assert advise(unnamed).rule == "tool-forbidden"
    assert advise(named).action == Action.GRANT


def test_a_grant_continues_the_refused_step_alone_with_the_same_key(sim, person):
    task = stopped_goodwill()
    refused_key = ToolCall.objects.get(task=task, tool="issue_credit").idempotency_key

    grant = scope_grant(
        task_id=task.pk,
        scope="payments:credit",
        minutes=15,
        to_agent=False,
        actor=person,
        reason="credential predates the tool",
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED
    assert grant.task_id == task.pk and grant.agent == "goodwill"
    assert timedelta(minutes=14) < grant.expires_at - timezone.now() <= timedelta(minutes=15)
    starts = Event.objects.filter(task=task, action="agentops.step.started")
    assert sorted(starts.values_list("step_ordinal", flat=True)) == [0, 1, 2, 2, 3]
    calls = ToolCall.objects.filter(task=task, tool="issue_credit").order_by("id")
    assert [c.status for c in calls] == [LedgerStatus.FAILED, LedgerStatus.SUCCEEDED]
    assert {c.idempotency_key for c in calls} == {refused_key}
    assert Effect.objects.filter(service="payments", operation="credit").count() == 1
    granted = Event.objects.get(task=task, action="agentops.scope.granted")
    assert granted.actor_label == "grace" and granted.payload["scope"] == "payments:credit"


def test_only_the_named_scope_is_granted_and_only_to_a_task_stopped_for_it(sim, person):
    task = stopped_goodwill()

    with pytest.raises(GrantRefused, match="lack of payments:credit, not payments:refund"):
        scope_grant(
            task_id=task.pk,
            scope="payments:refund",
            minutes=15,
            to_agent=False,
            actor=person,
            reason="x",
        )
    for minutes in (0, 7 * 24 * 60 + 1):
        with pytest.raises(GrantRefused, match="1 to 10080 minutes"):
            scope_grant(
                task_id=task.pk,
                scope="payments:credit",
                minutes=minutes,
                to_agent=False,
                actor=person,
                reason="x",
            )
    with pytest.raises(GrantRefused, match="say why"):
        scope_grant(
            task_id=task.pk,
            scope="payments:credit",
            minutes=5,
            to_agent=False,
            actor=person,
            reason="  ",
        )
    scope_grant(
        task_id=task.pk,
        scope="payments:credit",
        minutes=5,
        to_agent=False,
        actor=person,
        reason="x",
    )
    with pytest.raises(TransitionRefused, match="is queued"):
        scope_grant(
            task_id=task.pk,
            scope="payments:credit",
            minutes=5,
            to_agent=False,
            actor=person,
            reason="x",
        )
    assert ScopeGrant.objects.count() == 1


def test_an_agent_grant_covers_its_other_tasks_and_expiry_or_revocation_ends_it(sim, person):
    task = stopped_goodwill()
    other = goodwill(order_id="A1001")
    agent = get_agent("goodwill")
    grant = scope_grant(
        task_id=task.pk,
        scope="payments:credit",
        minutes=60,
        to_agent=True,
        actor=person,
        reason="x",
    )

    assert grant.task_id is None
    assert "payments:credit" in scopes_held(other, agent)
    assert run_until_parked_or_done(other).status == TaskStatus.SUCCEEDED

    scope_grant_revoke(grant_id=grant.pk, actor=person, reason="the credential was reissued")
    assert "payments:credit" not in scopes_held(other, agent)
    with pytest.raises(GrantRefused, match="already revoked by grace"):
        scope_grant_revoke(grant_id=grant.pk, actor=person, reason="again")

    third = run_until_parked_or_done(goodwill(order_id="A1002", amount=5))
    assert third.status == TaskStatus.NEEDS_ATTENTION
    assert third.failure["detail"]["missing_scope"] == "payments:credit"
    expired = scope_grant(
        task_id=third.pk,
        scope="payments:credit",
        minutes=1,
        to_agent=False,
        actor=person,
        reason="x",
    )
    ScopeGrant.objects.filter(pk=expired.pk).update(
        created_at=timezone.now() - timedelta(minutes=2),
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    assert "payments:credit" not in scopes_held(third, agent)
    with pytest.raises(GrantRefused, match="expired"):
        scope_grant_revoke(grant_id=expired.pk, actor=person, reason="late")


def test_an_agent_grant_does_not_reach_the_tasks_its_granter_started(sim, person):
    """Separation of duties: the agent-wide grant covers others' tasks, never the granter's own,
    whether started before the grant or after it (engine/scopes.py: grants_for)."""
    agent = get_agent("goodwill")
    before = task_create(
        agent="goodwill",
        goal="Credit",
        input={"order_id": "A1001", "amount": 10},
        created_by=person,
    )
    grant = scope_grant(
        task_id=stopped_goodwill().pk,
        scope="payments:credit",
        minutes=60,
        to_agent=True,
        actor=person,
        reason="x",
    )
    after = run_until_parked_or_done(
        task_create(
            agent="goodwill",
            goal="Credit",
            input={"order_id": "A1002", "amount": 10},
            created_by=person,
        )
    )

    assert grant.task_id is None
    assert "payments:credit" in scopes_held(goodwill(order_id="A1003"), agent)
    assert "payments:credit" not in scopes_held(before, agent)
    assert after.status == TaskStatus.NEEDS_ATTENTION
    assert after.failure["detail"]["missing_scope"] == "payments:credit"


def test_an_agent_that_declares_no_scopes_sends_no_scope_header(sim, monkeypatch):
    sent: list[httpx.Headers] = []
    original = httpx.Client.post

    def spy(self, url, **kwargs):
        sent.append(httpx.Headers(kwargs.get("headers") or {}))
        return original(self, url, **kwargs)

    monkeypatch.setattr(httpx.Client, "post", spy)
    refund = task_create(agent="refund", goal="Refund A1001", input={"order_id": "A1001"})
    run_until_parked_or_done(refund)
    run_until_parked_or_done(goodwill())

    assert get_agent("refund").scopes is None
    scoped = [h["X-OAuth-Scopes"] for h in sent if "X-OAuth-Scopes" in h]
    assert len(sent) - len(scoped) == 5  # the refund's five calls: the unrestricted key
    assert scoped == ["email:send logistics:track orders:lookup"] * 3
