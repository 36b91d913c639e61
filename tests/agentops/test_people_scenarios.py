"""The two scenarios where a person acts through the API, end to end with real processes (the
simulated services, a worker, the sweeper and the web process): a scope granter grants the scope
a service refused, and an operator answers an agent's question. Each decision is one entry in
the decision log, made with the person's API token."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agentops.states import TaskStatus
from reviews.models import Decision
from tests.conftest import database_url
from tests.reviews.conftest import ensure_groups

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]


@pytest.fixture(autouse=True)
def roles(transactional_db: None) -> None:
    """The role groups and their permissions, as migrations make them (an earlier transactional
    test's flush emptied them): the granter must be an operator who may read the task."""
    ensure_groups()


def run(name: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()
    call_command("demo_scenario", name, "--json", "--timeout", "120", stdout=out)
    return json.loads(out.getvalue())


def test_grant_scope_ends_succeeded_with_one_grant_and_no_other_step_repeated(
    sim_server, redis_clean, monkeypatch
):
    report = run("grant-scope", monkeypatch)

    assert report["task_status"] == TaskStatus.SUCCEEDED
    assert report["grants"] == 1
    assert report["step_starts"] == {"0": 1, "1": 1, "2": 2, "3": 1}
    assert report["effects"] == {"email.send": 1, "payments.credit": 1}
    (decision,) = Decision.objects.all()
    assert decision.action == "reviews.scope.granted" and decision.channel == "api"
    assert decision.actor_label == "scenario-granter"


def test_ask_human_ends_succeeded_with_the_answer_the_agent_acted_on(
    sim_server, redis_clean, monkeypatch
):
    report = run("ask-human", monkeypatch)

    assert report["task_status"] == TaskStatus.SUCCEEDED
    assert report["questions"] == 1 and report["answers"] == ["half"]
    assert report["effects"] == {"email.send": 1, "payments.refund": 1}
    (decision,) = Decision.objects.all()
    assert decision.action == "reviews.question.answered" and decision.channel == "api"
