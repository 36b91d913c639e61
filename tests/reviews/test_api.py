"""The JSON API: token authentication, the same services and rules as the pages (digest bound,
409s, separation of duties, the decision log), and every operation against every role."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from agentops.models import Gate, Task, ToolCall
from agentops.states import GateStatus, TaskStatus
from reviews.api import api
from reviews.models import Decision
from reviews.tokens import api_token_create, api_token_revoke
from tests.agentops.test_runner import run_until_parked_or_done
from tests.reviews.builders import gated_refund, open_gate, stopped_trip

pytestmark = pytest.mark.django_db(transaction=True)


def api_client(user: Any) -> Client:
    _, token = api_token_create(user=user, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1{path}", body, content_type="application/json")


def test_a_gate_approved_through_the_api_runs_and_the_log_names_the_tokens_user(
    sim_server, redis_clean, operator, starter
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
    sim_server, redis_clean, operator
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


def test_the_starter_cannot_approve_their_own_gate_through_the_api(
    sim_server, redis_clean, starter
):
    gate = open_gate(gated_refund(created_by=starter))

    response = post(
        api_client(starter), f"/gates/{gate.pk}/approve", {"seen_digest": gate.args_digest}
    )

    assert response.status_code == 403
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_reject_and_edit_go_through_the_same_services(sim_server, redis_clean, operator):
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


def test_a_task_started_through_the_api_belongs_to_the_tokens_user(
    sim_server, redis_clean, starter
):
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


def test_the_api_takes_budgets_and_refuses_what_postgresql_cannot_store(
    sim_server, redis_clean, starter
):
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


def test_no_token_a_revoked_token_or_a_session_cookie_gets_401(operator):
    client = Client()
    client.force_login(operator)  # a browser session does not authenticate the API
    row, token = api_token_create(user=operator, name="old")
    api_token_revoke(token_id=row.pk, user=operator)

    assert Client().get("/api/v1/tasks").status_code == 401
    assert client.get("/api/v1/tasks").status_code == 401
    assert Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/tasks").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer ao_x_y").get("/api/v1/tasks").status_code == 401


def test_the_openapi_description_is_served_and_lists_every_operation():
    schema = Client().get("/api/v1/openapi.json").json()

    assert schema["info"]["title"] == "agentops API"
    assert set(schema["paths"]) == {f"/api/v1{path}" for path in API_ACCESS_PATHS}


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
    sim_server, redis_clean, operator, auditor, policy_admin, starter
):
    task = gated_refund(created_by=starter)
    gate = open_gate(task)
    stopped_trip(created_by=starter)
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
        extra = {"reject": {"feedback": "no"}, "edit": {"arguments": gate.arguments}}
        return {"seen_digest": digest, **extra.get(action, {})}

    failures = []
    for (method, template), allowed in API_ACCESS.items():
        path = template.format(task_id=task.pk, gate_id=gate.pk)
        for role, client in clients.items():
            if method == "GET":
                response = client.get(f"/api/v1{path}")
                hidden = 404 if template == "/tasks/{task_id}" else 403  # as on the pages
                expected = {200} if role in allowed else {hidden}
            elif path == "/tasks":
                response = post(client, path, {"agent": "nope", "goal": "x"})
                # A starter gets as far as the unknown agent (400); the others are refused first.
                expected = {400} if role in allowed else {403}
            else:
                response = post(client, path, body(path.rsplit("/", 1)[1], role))
                expected = {409} if role in allowed else {403}
            if response.status_code not in expected:
                failures.append(f"{method} {path} as {role}: {response.status_code}")
        anonymous = Client().generic(method, f"/api/v1{path}")
        if anonymous.status_code != 401:
            failures.append(f"{method} {path} without a token: {anonymous.status_code}")

    assert not failures, "\n".join(failures)
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert not Decision.objects.exists()
