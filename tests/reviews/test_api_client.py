"""A client generated from the live OpenAPI description, used as a tool around the product would
use it: openapi-python-client writes it into a scratch directory at test time, and it talks over
a real socket to the test server (pytest-django's live_server) with personal tokens.

It lists gates, approves one, starts a task, and meets each documented error as a typed answer:
401 (no token, a bad token), 403 (a role that may not), 404, 409, 400 and 422.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from agentops.models import Gate, Task
from agentops.states import GateStatus
from agentops.tokens import api_token_create
from reviews.models import Decision
from tests.reviews.builders import gated_refund, open_gate

pytestmark = pytest.mark.django_db(transaction=True)

PACKAGE = "agentops_client"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")


@pytest.fixture
def generated(live_server: Any, tmp_path: Path) -> Iterator[ModuleType]:
    """The client package generated from the server's own /api/v1/openapi.json, imported."""
    schema = httpx.get(f"{live_server.url}/api/v1/openapi.json", timeout=10).json()
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    # The dataset export streams JSON Lines, a type the generator does not know: a client takes
    # it as bytes (its documented override for unknown content types).
    (tmp_path / "config.yaml").write_text(
        f"package_name_override: {PACKAGE}\n"
        "content_type_overrides:\n  application/x-ndjson: application/octet-stream\n"
    )
    # The generator formats its output with ruff, which it looks up on PATH.
    env = {**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(tmp_path / "schema.json"),
            "--output-path",
            str(tmp_path / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(tmp_path / "config.yaml"),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def operation(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.default.{name}")


def model(name: str) -> Any:
    return getattr(importlib.import_module(f"{PACKAGE}.models"), name)


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    """Generated clients to close after the test: an open keep-alive connection holds a live
    server thread, and its database session, past the test database's teardown."""
    clients: list[Any] = []
    yield clients
    for client in clients:
        client.get_httpx_client().close()


def test_a_generated_client_lists_approves_starts_and_gets_each_documented_error(
    generated, opened, live_server, sim_server, redis_clean, operator, auditor, starter
):
    gate = open_gate(gated_refund(created_by=starter))
    base = live_server.url

    def client(user: Any = None, token: str = "") -> Any:
        if user is not None:
            _, token = api_token_create(user=user, name="generated client")
        made = (
            generated.AuthenticatedClient(base_url=base, token=token, timeout=httpx.Timeout(30))
            if token
            else generated.Client(base_url=base, timeout=httpx.Timeout(30))
        )
        opened.append(made)
        return made

    as_operator, as_auditor, as_starter = client(operator), client(auditor), client(starter)
    anonymous, bad_token = client(), client(token="ao_0000_not-a-token")
    GateStatusEnum, ApproveIn, RejectIn, TaskIn = (
        model(n) for n in ("GateStatus", "ApproveIn", "RejectIn", "TaskIn")
    )
    list_gates, get_gate, approve_gate, reject_gate, start_task = (
        operation(n)
        for n in ("list_gates", "get_gate", "approve_gate", "reject_gate", "start_task")
    )

    # Lists the open gates, typed.
    listed = list_gates.sync_detailed(client=as_operator, status=GateStatusEnum.OPEN)
    assert listed.status_code == 200
    assert [(g.id, g.status, g.args_digest) for g in listed.parsed] == [
        (gate.pk, GateStatusEnum.OPEN, gate.args_digest)
    ]

    # Approves it with the digest it saw; a second approval is a 409 and changes nothing.
    approved = approve_gate.sync_detailed(
        gate.pk, client=as_operator, body=ApproveIn(seen_digest=listed.parsed[0].args_digest)
    )
    again = approve_gate.sync_detailed(
        gate.pk, client=as_operator, body=ApproveIn(seen_digest=gate.args_digest)
    )
    assert approved.status_code == 200
    assert (approved.parsed.status, approved.parsed.decided_by) == (
        GateStatusEnum.APPROVED,
        operator.username,
    )
    assert again.status_code == 409
    assert again.parsed.detail == "this gate is already approved"

    # Starts a task as a task starter.
    started = start_task.sync_detailed(
        client=as_starter,
        body=TaskIn.from_dict({"agent": "refund", "goal": "Refund A1001", "input": {}}),
    )
    assert started.status_code == 201
    assert started.parsed.created_by == starter.username
    assert Task.objects.filter(pk=started.parsed.id, created_by=starter).exists()

    # 401 without a token and with a bad one, each with its challenge.
    missing = list_gates.sync_detailed(client=anonymous)
    wrong = list_gates.sync_detailed(client=bad_token)
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="agentops API"'
    assert 'error="invalid_token"' in wrong.headers["WWW-Authenticate"]
    assert isinstance(wrong.parsed, model("Error"))

    # 403 for roles that may not: an auditor deciding, an operator starting a task.
    auditor_decides = reject_gate.sync_detailed(
        gate.pk, client=as_auditor, body=RejectIn(seen_digest=gate.args_digest, feedback="no")
    )
    operator_starts = start_task.sync_detailed(
        client=as_operator, body=TaskIn(agent="refund", goal="Refund A1001")
    )
    assert (auditor_decides.status_code, operator_starts.status_code) == (403, 403)
    assert auditor_decides.parsed.detail == "deciding gates is for operators"

    # 404 for a gate that does not exist, 400 for a rejection without feedback.
    missing_gate = get_gate.sync_detailed(0, client=as_operator)
    unknown_agent = start_task.sync_detailed(client=as_starter, body=TaskIn(agent="nope", goal="x"))
    assert missing_gate.status_code == 404 and missing_gate.parsed.detail == "no gate 0"
    assert unknown_agent.status_code == 400 and "nope" in unknown_agent.parsed.detail

    # 422: what the typed client will not send (an unknown status) still answers the declared
    # shape, which the generated model reads.
    raw = as_operator.get_httpx_client().get("/api/v1/gates", params={"status": "bogus"})
    assert raw.status_code == 422
    problems = model("ValidationErrors").from_dict(raw.json())
    assert [(p.loc, p.type_) for p in problems.detail] == [(["query", "status"], "enum")]

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.APPROVED
    (decision,) = Decision.objects.filter(action__startswith="reviews.gate.")
    assert decision.channel == "api" and decision.actor_label == operator.username
