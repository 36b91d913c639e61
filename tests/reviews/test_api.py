"""The JSON API: token authentication, the same services and rules as the pages (digest bound,
409s, separation of duties, the decision log), and every operation against every role."""

from __future__ import annotations

import json
import logging
import math
import re
import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agentops.models import ApiToken, Gate, Task, ToolCall
from agentops.plumbing import queues
from agentops.plumbing.logs import StructuredFormatter
from agentops.states import GateStatus, TaskStatus
from agentops.tokens import api_token_create, api_token_revoke
from agentops.urls import api
from reviews.models import Claim, Decision
from tests.builders import run_until_parked_or_done
from tests.factories import gated_refund_row, stopped_trip_row
from tests.reviews.builders import asked_question, gated_refund, open_gate

pytestmark = pytest.mark.django_db


def api_client(user: Any) -> Client:
    _, token = api_token_create(user=user, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1{path}", body, content_type="application/json")


def test_a_gate_approved_through_the_api_runs_and_the_log_names_the_tokens_user(
    sim, redis_clean, operator, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    client = api_client(operator)

    shown = client.get(f"/api/v1/gates/{gate.pk}").json()
    response = post(client, f"/gates/{gate.pk}/approve", {"seen_digest": shown["args_digest"]})
    finished = run_until_parked_or_done(Task.objects.get(pk=task.pk))

    assert response.status_code == 200
    assert response.json()["status"] == GateStatus.APPROVED
    assert response.json()["decided_by"] == operator.username
    (decision,) = Decision.objects.filter(action="reviews.gate.approved")
    assert decision.actor_id == operator.pk and decision.actor_label == operator.username
    assert finished.status == TaskStatus.SUCCEEDED
    assert ToolCall.objects.filter(task=task, tool="issue_refund").count() == 1


def test_a_stale_digest_or_a_second_decision_gets_409_and_changes_nothing(
    sim, redis_clean, operator
):
    gate = open_gate(gated_refund())
    client = api_client(operator)

    stale = post(client, f"/gates/{gate.pk}/approve", {"seen_digest": "0" * 64})
    first = post(client, f"/gates/{gate.pk}/approve", {"seen_digest": gate.args_digest})
    again = post(client, f"/gates/{gate.pk}/approve", {"seen_digest": gate.args_digest})
    missing = post(client, f"/gates/{gate.pk}/approve", {})

    assert (stale.status_code, first.status_code, again.status_code) == (409, 200, 409)
    assert missing.status_code == 422
    assert Decision.objects.filter(action__startswith="reviews.gate.").count() == 1


def test_deciding_an_item_someone_else_holds_answers_409_and_does_nothing(
    sim, redis_clean, operator, operator2
):
    gate = open_gate(gated_refund())
    question = asked_question()
    for held in (gate, question):
        Claim.objects.create(task_id=held.task_id, user=operator2)
    client = api_client(operator)
    digest = {"seen_digest": gate.args_digest}

    # The same answer for a gate's decisions and a question's, as for grants and plan repairs.
    answers = {
        "approve": post(client, f"/gates/{gate.pk}/approve", digest),
        "reject": post(client, f"/gates/{gate.pk}/reject", {**digest, "feedback": "no"}),
        "edit": post(client, f"/gates/{gate.pk}/edit", {**digest, "arguments": gate.arguments}),
        "answer": post(
            client,
            f"/questions/{question.pk}/answer",
            {"seen_digest": question.args_digest, "choice": "half"},
        ),
    }

    assert {name: answer.status_code for name, answer in answers.items()} == dict.fromkeys(
        answers, 409
    )
    for answer in answers.values():
        assert "otto is already working on this task" in answer.json()["detail"]
    assert Gate.objects.filter(status=GateStatus.OPEN).count() == 2
    assert not Decision.objects.exists()
    assert set(Claim.objects.values_list("user__username", flat=True)) == {"otto"}


def test_the_starter_cannot_approve_their_own_gate_through_the_api(redis_clean, starter):
    gate = open_gate(gated_refund_row(created_by=starter))

    response = post(
        api_client(starter), f"/gates/{gate.pk}/approve", {"seen_digest": gate.args_digest}
    )

    assert response.status_code == 403
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_reject_and_edit_go_through_the_same_services(sim, redis_clean, operator):
    rejected = open_gate(gated_refund(order_id="B2002"))
    edited = open_gate(gated_refund(order_id="B2002", goal="second"))
    client = api_client(operator)

    no_reason = post(
        client,
        f"/gates/{rejected.pk}/reject",
        {"seen_digest": rejected.args_digest, "feedback": " "},
    )
    reject = post(
        client,
        f"/gates/{rejected.pk}/reject",
        {"seen_digest": rejected.args_digest, "feedback": "ask the customer first"},
    )
    bad_edit = post(
        client, f"/gates/{edited.pk}/edit", {"seen_digest": edited.args_digest, "arguments": {}}
    )
    edit = post(
        client,
        f"/gates/{edited.pk}/edit",
        {"seen_digest": edited.args_digest, "arguments": {**edited.arguments, "amount": 90}},
    )

    assert no_reason.status_code == 400
    assert reject.status_code == 200 and reject.json()["feedback"] == "ask the customer first"
    assert bad_edit.status_code == 400
    assert edit.status_code == 200
    actions = sorted(Decision.objects.values_list("action", flat=True))
    assert actions == ["reviews.gate.edited", "reviews.gate.rejected"]


def test_a_task_started_through_the_api_belongs_to_the_tokens_user(sim, redis_clean, starter):
    client = api_client(starter)

    created = post(
        client,
        "/tasks",
        {"agent": "refund", "goal": "Refund A1001", "input": {"order_id": "A1001"}},
    )
    unknown = post(client, "/tasks", {"agent": "nope", "goal": "x"})
    no_goal = post(client, "/tasks", {"agent": "refund", "goal": "  "})

    assert created.status_code == 201
    task = Task.objects.get(pk=created.json()["id"])
    assert task.created_by == starter and created.json()["created_by"] == starter.username
    assert unknown.status_code == 400 and "nope" in unknown.json()["detail"]
    assert no_goal.status_code == 400
    assert Task.objects.count() == 1


def test_the_api_takes_budgets_and_refuses_what_postgresql_cannot_store(sim, redis_clean, starter):
    client = api_client(starter)

    created = post(
        client,
        "/tasks",
        {
            "agent": "refund",
            "goal": "Refund",
            "token_budget": 900,
            "cost_budget": "0.5",
            "wall_time_budget_seconds": 120,
        },
    )
    surrogate = client.post(
        "/api/v1/tasks",
        '{"agent": "refund", "goal": "Refund", "input": {"\\ud800": 1}}',
        content_type="application/json",
    )

    assert created.status_code == 201
    body = created.json()
    assert (body["token_budget"], body["cost_budget"], body["wall_time_budget_seconds"]) == (
        900,
        "0.5",
        120,
    )
    assert body["tokens_saved"] == 0
    assert surrogate.status_code == 400
    assert "input.<key '\\ud800'>: contains a lone surrogate" in surrogate.json()["detail"]
    assert Task.objects.count() == 1


@pytest.mark.parametrize(
    ("depth", "says"),
    [
        (300, "input.a" + "[0]" * 199 + ": nested deeper than 200 levels"),
        (100_000, "Cannot parse request body"),
    ],
    ids=["past-the-limit", "past-json"],
)
def test_the_api_refuses_input_nested_too_deeply_with_a_400(redis_clean, starter, depth, says):
    client = api_client(starter)

    response = client.post(
        "/api/v1/tasks",
        '{"agent": "refund", "goal": "Refund", "input": {"a": ' + "[" * depth + "]" * depth + "}}",
        content_type="application/json",
    )

    assert response.status_code == 400
    assert response.json()["detail"] == says
    assert Task.objects.count() == 0


@pytest.mark.parametrize(
    ("goal", "says"),
    [
        ("Refund \\u0000", "goal: contains a NUL character, which cannot be stored"),
        ("Refund \\ud800", "goal: contains a lone surrogate (\\ud800), which cannot be stored"),
    ],
    ids=["nul", "lone-surrogate"],
)
def test_the_api_refuses_a_goal_that_cannot_be_stored_with_a_400(redis_clean, starter, goal, says):
    client = api_client(starter)

    # The JSON text escapes them, as a client sends them.
    body = '{"agent": "refund", "goal": "' + goal + '"}'
    response = client.post("/api/v1/tasks", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["detail"] == says
    assert Task.objects.count() == 0


def test_a_task_started_through_the_api_while_redis_never_answers_is_created_within_the_deadline(
    queue_on_black_hole, starter
):
    began = time.monotonic()
    response = post(api_client(starter), "/tasks", {"agent": "refund", "goal": "Refund A1001"})
    took = time.monotonic() - began

    assert response.status_code == 201, response.content
    assert queues.DEADLINE_SECONDS <= took < queues.DEADLINE_SECONDS + 5  # not forever
    assert len(queue_on_black_hole.connections) == 1  # the enqueue asked, and gave up
    task = Task.objects.get(pk=response.json()["id"])
    assert task.status == TaskStatus.QUEUED  # the sweeper enqueues it once Redis answers


def test_no_token_a_revoked_token_or_a_session_cookie_gets_401(operator):
    client = Client()
    client.force_login(operator)  # a browser session does not authenticate the API
    row, token = api_token_create(user=operator, name="old")
    api_token_revoke(token_id=row.pk, user=operator)

    assert Client().get("/api/v1/tasks").status_code == 401
    assert client.get("/api/v1/tasks").status_code == 401
    assert Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/tasks").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer ao_x_y").get("/api/v1/tasks").status_code == 401


def test_a_tokens_last_use_is_written_once_a_minute_not_on_every_request(operator):
    row, token = api_token_create(user=operator, name="ci")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def token_writes() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/api/v1/tasks").status_code == 200
        return sum(q["sql"].startswith('UPDATE "agentops_apitoken"') for q in queries)

    assert token_writes() == 1  # never used: noted
    first = ApiToken.objects.get(pk=row.pk).last_used_at
    assert first is not None
    assert token_writes() == 0  # used again within the minute: nothing written
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=first - timedelta(seconds=61))
    assert token_writes() == 1  # a minute later: noted again
    assert ApiToken.objects.get(pk=row.pk).last_used_at > first


def test_the_openapi_description_is_served_and_lists_every_operation():
    schema = Client().get("/api/v1/openapi.json").json()
    operations = [op for path in schema["paths"].values() for op in path.values()]

    assert schema["info"]["title"] == "agentops API"
    assert set(schema["paths"]) == {f"/api/v1{path}" for path in API_ACCESS_PATHS}
    assert len(operations) == len(API_ACCESS)
    assert all({"401", "429"} <= set(op["responses"]) for op in operations)
    throttled = operations[0]["responses"]["429"]["content"]["application/json"]["schema"]
    assert schema["components"]["schemas"]["ThrottledError"]["required"] == [
        "detail",
        "retry_after",
    ]
    assert throttled == {"$ref": "#/components/schemas/ThrottledError"}


# -- bad tokens are throttled per address -------------------------------------------------------


@pytest.fixture
def token_limits(settings: Any) -> dict[str, Any]:
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "API_ADDRESS_ATTEMPTS": 3,
        "THROTTLE_WINDOW_SECONDS": 60.0,
        "THROTTLE_LOCKOUT_SECONDS": 120.0,
        "THROTTLE_LOCKOUT_MAX_SECONDS": 3600.0,
        "TRUSTED_PROXY_HOPS": 0,
    }
    return settings.AGENTOPS


def bearer(token: str, address: str = "127.0.0.1") -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}", REMOTE_ADDR=address)


def test_bad_tokens_from_one_address_get_429_with_retry_after_even_for_a_good_token(
    operator, token_limits
):
    _, good = api_token_create(user=operator, name="tests")
    guesses = [bearer(f"ao_guess{n}_{n}").get("/api/v1/tasks") for n in range(3)]
    locked_at = time.monotonic()
    good_from_there = bearer(good).get("/api/v1/gates")
    elapsed = math.ceil(time.monotonic() - locked_at)

    assert [g.status_code for g in guesses] == [401, 401, 429]
    assert guesses[2]["Retry-After"] == "120"
    assert guesses[2].json() == {
        "detail": "too many bad tokens from this address; try again in 120 seconds",
        "retry_after": 120,
    }
    assert good_from_there.status_code == 429
    # What is left of the lockout: 120 s less the seconds since it began.
    assert 120 - elapsed - 1 <= int(good_from_there["Retry-After"]) <= 120
    assert good_from_there.json()["retry_after"] == int(good_from_there["Retry-After"])


def test_a_good_token_is_unaffected_by_someone_elses_address(operator, token_limits):
    _, good = api_token_create(user=operator, name="tests")
    for n in range(4):
        bearer(f"ao_guess{n}_{n}", "203.0.113.5").get("/api/v1/tasks")

    mine = bearer(good, "198.51.100.7").get("/api/v1/tasks")
    theirs = bearer(good, "203.0.113.5").get("/api/v1/tasks")

    assert mine.status_code == 200
    assert theirs.status_code == 429


def test_good_tokens_and_missing_ones_are_never_counted(operator, token_limits):
    _, good = api_token_create(user=operator, name="tests")
    answers = [bearer(good).get("/api/v1/tasks").status_code for _ in range(5)]
    answers += [Client().get("/api/v1/tasks").status_code for _ in range(5)]
    answers += [bearer("ao_guess_1").get("/api/v1/tasks").status_code for _ in range(2)]

    assert answers == [200] * 5 + [401] * 5 + [401, 401]


def test_the_token_window_expires(operator, token_limits):
    token_limits.update(THROTTLE_WINDOW_SECONDS=1.0, THROTTLE_LOCKOUT_SECONDS=1.0)
    _, good = api_token_create(user=operator, name="tests")
    early = [bearer(f"ao_guess{n}_{n}").get("/api/v1/tasks").status_code for n in range(2)]
    time.sleep(1.1)
    late = [bearer(f"ao_guess{n}_{n}").get("/api/v1/tasks").status_code for n in range(3)]
    locked = bearer(good).get("/api/v1/tasks").status_code
    time.sleep(1.1)
    after = bearer(good).get("/api/v1/tasks").status_code

    assert (early, late, locked, after) == ([401, 401], [401, 401, 429], 429, 200)


def test_a_token_lockout_is_logged_without_the_token(operator, token_limits, caplog):
    guesses = [f"ao_deadbeef_{n}-not-a-real-secret-{n}" for n in range(3)]
    with caplog.at_level(logging.INFO, logger="agentops.plumbing.throttle"):
        for guess in guesses:
            bearer(guess, "192.0.2.9").get("/api/v1/tasks")

    (record,) = [r for r in caplog.records if r.name == "agentops.plumbing.throttle"]
    line = StructuredFormatter("json").format(record)
    assert json.loads(line) | {"time": None, "request_id": None} == {
        "time": None,
        "request_id": None,  # the request's id (tests/agentops/test_deploy.py checks its form)
        "method": "GET",
        "path": "/api/v1/tasks",
        "level": "WARNING",
        "logger": "agentops.plumbing.throttle",
        "scope": "api.address",
        "client": "192.0.2.9",
        "failures": 3,
        "lockout_seconds": 120,
        "msg": "agentops.plumbing.throttle.locked: too many failed attempts",
    }
    assert not any(guess in str(r.__dict__) for guess in guesses for r in caplog.records)


def test_the_api_token_command_prints_a_token_once_that_works(operator, capsys):
    call_command("api_token", "create", operator.username, "--name", "ci")
    token = capsys.readouterr().out.strip().splitlines()[-1]

    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/tasks")

    assert token.startswith("ao_")
    assert response.status_code == 200


# -- every operation against every role ---------------------------------------------------------

OPERATOR, AUDITOR, POLICY_ADMIN, STARTER = "operator", "auditor", "policy admin", "starter"
# The starter is an operator who started the task: they read like one, but may not decide its gate;
# they are the only one here with the task-starter role.
READERS = {OPERATOR, AUDITOR, STARTER}
EVERYONE = {OPERATOR, AUDITOR, POLICY_ADMIN, STARTER}

# (method, path template) -> roles allowed; the others get 403 (404 for another's task).
API_ACCESS: dict[tuple[str, str], set[str]] = {
    ("GET", "/tasks"): EVERYONE,
    ("POST", "/tasks"): {STARTER},
    ("GET", "/tasks/stopped"): READERS,
    ("GET", "/tasks/{task_id}"): READERS | {STARTER},
    ("GET", "/gates"): READERS,
    ("GET", "/gates/{gate_id}"): READERS,
    ("POST", "/gates/{gate_id}/approve"): {OPERATOR},
    ("POST", "/gates/{gate_id}/reject"): {OPERATOR},
    ("POST", "/gates/{gate_id}/edit"): {OPERATOR},
    ("GET", "/audit"): READERS,
    ("GET", "/questions"): READERS,
    ("POST", "/questions/{gate_id}/answer"): {OPERATOR, STARTER},
    # Granting scopes is the scope granters' (none of these roles): tests/reviews/test_grants.py.
    ("GET", "/tasks/{task_id}/grants"): READERS,
    ("POST", "/tasks/{task_id}/grants"): set(),
    ("POST", "/grants/{grant_id}/revoke"): set(),
    # No separation of duties here (as for interventions): the starter, an operator, may too.
    ("POST", "/tasks/{task_id}/plan-repair"): {OPERATOR, STARTER},
    ("GET", "/tasks/{task_id}/decisions"): EVERYONE,
    ("GET", "/gates/{gate_id}/notices"): READERS,
    # No separation of duties here: the starter, an operator, may start their task again.
    ("POST", "/tasks/{task_id}/restart"): {OPERATOR, STARTER},
    ("POST", "/tasks/{task_id}/fork"): {OPERATOR, STARTER},
    # Rubric reviews and batches (the starter is an operator; senior auditors are none of these).
    ("GET", "/rubrics"): EVERYONE,
    ("POST", "/rubrics"): {POLICY_ADMIN},
    ("POST", "/rubrics/{rubric_id}/queues"): {POLICY_ADMIN},
    ("GET", "/rubrics/agreement"): EVERYONE,
    ("GET", "/audit/{item_id}/rubric"): READERS,
    ("POST", "/audit/{item_id}/rubric"): {AUDITOR},
    ("GET", "/audit/adjudication"): READERS,
    ("POST", "/audit/{item_id}/adjudicate"): set(),
    ("POST", "/audit/batch"): {AUDITOR},
    ("POST", "/audit/batch/release"): {AUDITOR},
    ("GET", "/audit/dataset"): READERS,
    # The agents a task may start with: everyone signed in (the start form offers them).
    ("GET", "/agents"): EVERYONE,
    # The fleet's stop button is the holders of agentops.stop_fleet (none of these roles):
    # tests/reviews/test_fleet_stops.py.
    ("GET", "/stops"): set(),
    ("POST", "/stops"): set(),
    ("POST", "/stops/{stop_id}/resume"): set(),
    ("GET", "/oversight"): EVERYONE,
}
# What an allowed caller sends to these and gets (nothing is written): no such rubric or audit
# item (404), a rubric or batch that does not fit (400); giving back a batch one does not hold
# gives back nothing (200).
REFUSED_BODIES: dict[str, tuple[dict[str, Any], int]] = {
    "/rubrics": ({"name": "", "items": []}, 400),
    "/rubrics/{rubric_id}/queues": ({"agent": "refund"}, 404),
    "/audit/{item_id}/rubric": ({"answers": {}, "verdict": "ok"}, 404),
    "/audit/{item_id}/adjudicate": ({"answers": {}, "verdict": "ok"}, 404),
    "/audit/batch": ({"size": 0, "minutes": 5}, 400),
    "/audit/batch/release": ({}, 200),
}
# GETs of an object that is not there, for an allowed caller.
GET_MISSING = {"/audit/{item_id}/rubric"}
# GETs that need a query.
GET_QUERIES = {"/oversight": "?since=2026-01-01&until=2026-01-31"}
# Bodies an allowed caller sends to start the gated task again or fork it: refused (400), so
# nothing is started.
AGAIN_BODIES = {
    "/tasks/{task_id}/restart": {"ending": "keep", "reason": "x"},
    "/tasks/{task_id}/fork": {"from_step": 99, "reason": "x"},
}
API_ACCESS_PATHS = {path for _, path in API_ACCESS}


def test_every_api_operation_is_in_the_access_table():
    schema = api.get_openapi_schema()
    operations = {
        (method.upper(), path.removeprefix("/api/v1"))
        for path, methods in schema["paths"].items()
        for method in methods
    }

    assert operations == set(API_ACCESS)


def test_each_role_gets_exactly_the_api_access_the_table_gives(
    redis_clean, operator, auditor, policy_admin, starter
):
    task = gated_refund_row(created_by=starter)
    gate = open_gate(task)
    stopped_trip_row(created_by=starter)
    clients = {
        OPERATOR: api_client(operator),
        AUDITOR: api_client(auditor),
        POLICY_ADMIN: api_client(policy_admin),
        STARTER: api_client(starter),
    }

    def body(action: str, role: str) -> dict[str, Any]:
        # An allowed caller sends a stale digest and gets 409, not a decision; the starter sends
        # the real one, so that a missing separation-of-duties check would decide the gate.
        digest = gate.args_digest if role == STARTER else "0" * 64
        extra = {
            "reject": {"feedback": "no"},
            "edit": {"arguments": gate.arguments},
            # The task waits at its gate, not stopped: an allowed caller gets 409.
            "plan-repair": {"op": "instruct", "step": 5, "instruction": "x", "reason": "r"},
        }
        return {"seen_digest": digest, **extra.get(action, {})}

    schema = api.get_openapi_schema()
    declared = {
        (method.upper(), path.removeprefix("/api/v1")): {str(code) for code in op["responses"]}
        for path, methods in schema["paths"].items()
        for method, op in methods.items()
    }
    failures = []
    for (method, template), allowed in API_ACCESS.items():
        path = template.format(
            task_id=task.pk,
            gate_id=gate.pk,
            grant_id=1,
            rubric_id=999_999,
            item_id=999_999,
            stop_id=999_999,
        )
        for role, client in clients.items():
            if method == "GET":
                response = client.get(f"/api/v1{path}{GET_QUERIES.get(template, '')}")
                hidden = 404 if template == "/tasks/{task_id}" else 403  # as on the pages
                found = 404 if template in GET_MISSING else 200
                expected = {found} if role in allowed else {hidden}
            elif template in REFUSED_BODIES:
                sent, answer = REFUSED_BODIES[template]
                response = post(client, path, sent)
                expected = {answer} if role in allowed else {403}
            elif path == "/tasks":
                response = post(client, path, {"agent": "nope", "goal": "x"})
                # A starter gets as far as the unknown agent (400); the others are refused first.
                expected = {400} if role in allowed else {403}
            elif template == "/questions/{gate_id}/answer":
                # The gate is an approval, not a question: a caller allowed past the role is told
                # there is no such question (the separation of duties is tested with questions).
                response = post(client, path, body("answer", role))
                expected = {404} if role in allowed else {403}
            elif template in AGAIN_BODIES:
                response = post(client, path, AGAIN_BODIES[template])
                expected = {400} if role in allowed else {403}
            else:
                response = post(client, path, body(path.rsplit("/", 1)[1], role))
                expected = {409} if role in allowed else {403}
            if response.status_code not in expected:
                failures.append(f"{method} {path} as {role}: {response.status_code}")
            if str(response.status_code) not in declared[method, template]:
                failures.append(f"{method} {path} as {role}: {response.status_code} undeclared")
        anonymous = Client().generic(method, f"/api/v1{path}")
        if anonymous.status_code != 401:
            failures.append(f"{method} {path} without a token: {anonymous.status_code}")

    assert not failures, "\n".join(failures)
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert not Decision.objects.exists()


# -- an API's manners: challenges, JSON errors, enums, the order of checks ----------------------


def test_401_carries_a_bearer_challenge_and_says_invalid_token_only_for_a_bad_token(operator):
    missing = Client().get("/api/v1/gates")
    wrong = Client(HTTP_AUTHORIZATION="Bearer ao_x_y").get("/api/v1/gates")
    other_scheme = Client(HTTP_AUTHORIZATION="Basic b3BlcmF0b3I6eA==").get("/api/v1/gates")

    assert (missing.status_code, wrong.status_code, other_scheme.status_code) == (401, 401, 401)
    assert missing["WWW-Authenticate"] == 'Bearer realm="agentops API"'
    assert other_scheme["WWW-Authenticate"] == 'Bearer realm="agentops API"'
    assert wrong["WWW-Authenticate"] == (
        'Bearer realm="agentops API", error="invalid_token", '
        'error_description="the token is unknown, revoked, or its user is inactive"'
    )
    assert missing.json() == {"detail": "send a personal token: Authorization: Bearer ao_..."}
    assert wrong.json()["detail"].startswith("the token is unknown")


def test_unknown_paths_and_wrong_methods_under_the_api_answer_json_and_the_site_keeps_html(
    operator,
):
    client = api_client(operator)

    unknown = client.get("/api/v1/no/such/thing")
    unknown_anonymous = Client().post("/api/v1/gates/1/approve/extra")
    root = Client().get("/api/v1/")
    wrong_method = client.delete("/api/v1/gates")
    site_404 = Client().get("/no/such/page")

    assert unknown.status_code == 404 and unknown["Content-Type"].startswith("application/json")
    assert unknown.json() == {
        "detail": "no such path: /api/v1/no/such/thing; the operations are at /api/v1/docs"
    }
    assert unknown_anonymous.status_code == 404
    assert unknown_anonymous["Content-Type"].startswith("application/json")
    assert root.status_code == 404 and root.json()["detail"].startswith("no such path: /api/v1/;")
    assert wrong_method.status_code == 405 and wrong_method["Allow"] == "GET"
    assert wrong_method.json() == {"detail": "DELETE is not allowed here; allowed: GET"}
    assert site_404.status_code == 404 and site_404["Content-Type"].startswith("text/html")


def test_an_unknown_status_is_a_422_that_names_the_allowed_values(operator):
    client = api_client(operator)

    answers = {
        path: client.get(f"/api/v1{path}", {"status": "bogus"})
        for path in ("/tasks", "/gates", "/audit")
    }

    assert {path: a.status_code for path, a in answers.items()} == dict.fromkeys(answers, 422)
    (issue,) = answers["/gates"].json()["detail"]
    assert issue["loc"] == ["query", "status"] and issue["type"] == "enum"
    # The allowed values are named (the wording around them is pydantic's).
    assert all(
        f"'{status}'" in issue["msg"] for status in ("open", "approved", "rejected", "expired")
    )
    assert "'awaiting_approval'" in answers["/tasks"].json()["detail"][0]["msg"]
    assert client.get("/api/v1/gates", {"status": "approved"}).status_code == 200


def test_a_caller_without_the_role_gets_403_before_the_body_is_read(redis_clean, operator, auditor):
    gate = open_gate(gated_refund_row())
    auditor_client, operator_client = api_client(auditor), api_client(operator)

    answers = {
        "auditor approves with no body": post(auditor_client, f"/gates/{gate.pk}/approve", {}),
        "auditor approves a missing gate": post(auditor_client, "/gates/0/approve", {}),
        "operator starts a task with no body": post(operator_client, "/tasks", {}),
        "operator approves with no body": post(operator_client, f"/gates/{gate.pk}/approve", {}),
    }

    assert {what: a.status_code for what, a in answers.items()} == {
        "auditor approves with no body": 403,
        "auditor approves a missing gate": 403,
        "operator starts a task with no body": 403,
        "operator approves with no body": 422,
    }
    assert answers["auditor approves with no body"].json() == {
        "detail": "deciding gates is for operators"
    }
    assert answers["operator starts a task with no body"].json() == {
        "detail": f"{operator.username} may not start tasks: that needs the task-starter role"
    }
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_api_decisions_are_logged_with_the_api_channel_and_the_token(sim, redis_clean, operator):
    gate = open_gate(gated_refund())
    row, token = api_token_create(user=operator, name="chat bot")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    post(client, f"/gates/{gate.pk}/reject", {"seen_digest": gate.args_digest, "feedback": "no"})

    (decision,) = Decision.objects.all()
    assert decision.action == "reviews.gate.rejected"
    assert (decision.channel, decision.api_token_id) == ("api", row.pk)


def test_the_schema_has_readable_operation_ids_enums_and_every_error_it_answers():
    schema = Client().get("/api/v1/openapi.json").json()
    operations = {
        (method.upper(), path.removeprefix("/api/v1")): op
        for path, methods in schema["paths"].items()
        for method, op in methods.items()
    }
    components = schema["components"]["schemas"]

    assert {key: op["operationId"] for key, op in operations.items()} == {
        ("GET", "/tasks"): "list_tasks",
        ("POST", "/tasks"): "start_task",
        ("GET", "/tasks/stopped"): "list_stopped_tasks",
        ("GET", "/tasks/{task_id}"): "get_task",
        ("GET", "/gates"): "list_gates",
        ("GET", "/gates/{gate_id}"): "get_gate",
        ("POST", "/gates/{gate_id}/approve"): "approve_gate",
        ("POST", "/gates/{gate_id}/reject"): "reject_gate",
        ("POST", "/gates/{gate_id}/edit"): "edit_gate",
        ("GET", "/audit"): "list_audit_items",
        ("POST", "/audit/batch"): "take_audit_batch",
        ("GET", "/audit/dataset"): "export_audit_dataset",
        ("POST", "/audit/batch/release"): "release_audit_batch",
        ("GET", "/audit/{item_id}/rubric"): "get_item_rubric",
        ("POST", "/audit/{item_id}/rubric"): "answer_item_rubric",
        ("GET", "/audit/adjudication"): "list_adjudication",
        ("POST", "/audit/{item_id}/adjudicate"): "adjudicate_item",
        ("GET", "/rubrics"): "list_rubrics",
        ("POST", "/rubrics"): "create_rubric",
        ("POST", "/rubrics/{rubric_id}/queues"): "attach_rubric",
        ("GET", "/rubrics/agreement"): "get_rubric_agreement",
        ("GET", "/agents"): "list_agents",
        ("GET", "/stops"): "list_stops",
        ("POST", "/stops"): "make_stop",
        ("POST", "/stops/{stop_id}/resume"): "lift_stop",
        ("GET", "/oversight"): "get_oversight_report",
        ("GET", "/questions"): "list_questions",
        ("POST", "/questions/{gate_id}/answer"): "answer_question",
        ("GET", "/tasks/{task_id}/grants"): "list_grants",
        ("POST", "/tasks/{task_id}/grants"): "grant_scope",
        ("POST", "/grants/{grant_id}/revoke"): "revoke_grant",
        ("POST", "/tasks/{task_id}/plan-repair"): "repair_plan",
        ("GET", "/tasks/{task_id}/decisions"): "list_task_decisions",
        ("GET", "/gates/{gate_id}/notices"): "list_gate_notices",
        ("POST", "/tasks/{task_id}/restart"): "restart_task",
        ("POST", "/tasks/{task_id}/fork"): "fork_task",
    }
    for (method, path), op in operations.items():
        declared = set(op["responses"])
        assert {"401", "422", "429"} <= declared, (method, path)
        # Everyone signed in may list tasks and read their own, and list the agents; every
        # other operation has a role.
        assert ("403" in declared) == (
            (method, path)
            not in {("GET", "/tasks"), ("GET", "/tasks/{task_id}"), ("GET", "/agents")}
        )
    assert components["GateStatus"]["enum"] == ["open", "approved", "rejected", "expired"]
    assert components["GateOut"]["properties"]["status"] == {
        "$ref": "#/components/schemas/GateStatus"
    }
    assert components["AuditItemOut"]["properties"]["route"] == {
        "$ref": "#/components/schemas/Route"
    }
    gate_status = next(
        p for p in operations["GET", "/gates"]["parameters"] if p["name"] == "status"
    )
    assert gate_status["schema"] == {"$ref": "#/components/schemas/GateStatus", "default": "open"}
    assert components["ValidationErrors"]["properties"]["detail"]["items"] == {
        "$ref": "#/components/schemas/ValidationIssue"
    }


def test_the_interactive_docs_load_nothing_from_another_site():
    page = Client().get("/api/v1/docs")
    html = page.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)

    assert page.status_code == 200
    assert "/static/ninja/swagger-ui-bundle.js" in sources
    assert "/static/ninja/swagger-ui.css" in sources
    assert sources and all(source.startswith("/") for source in sources), sources
    assert finders.find("ninja/swagger-ui-bundle.js") is not None


def test_a_body_too_deep_or_too_big_to_read_answers_400_in_json_and_starts_nothing(task_starter):
    client = api_client(task_starter)
    deep = "[" * 100_000 + "]" * 100_000
    too_big = "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)

    answers = [
        client.post(
            "/api/v1/tasks",
            data=f'{{"agent": "refund", "goal": "{goal}", "input": {value}}}',
            content_type="application/json",
        )
        for goal, value in (("Refund", deep), (too_big, "{}"))
    ]

    assert [a.status_code for a in answers] == [400, 400]
    assert [a["Content-Type"] for a in answers] == ["application/json; charset=utf-8"] * 2
    assert answers[0].json()["detail"]  # django-ninja's words: not pinned here
    assert answers[1].json()["detail"] == (
        f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes, the most "
        "this server reads"
    )
    assert not Task.objects.exists()
