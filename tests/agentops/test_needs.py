"""What an agent needs from the deployment: an agent whose needs are not set is not offered (the
start form, `GET /api/v1/agents`), not started (`task_create`, the form, `POST /api/v1/tasks`: a
refusal naming the agent and the setting), not run by a worker that lacks them, and named by
`check --deploy`."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core import checks
from django.urls import reverse

from agentops import sdk
from agentops.checks import agents_needs_check, email_file_path_check, metrics_directory_check
from agentops.engine import registry
from agentops.engine.errors import AgentUnavailable, FailureKind
from agentops.engine.needs import agent_missing, agents_offered, setting_value
from agentops.engine.runner import task_advance
from agentops.engine.tasks import task_create
from agentops.models import Task
from agentops.states import TaskStatus
from agentops.tokens import api_token_create
from tests.builders import signed_in

pytestmark = pytest.mark.django_db

PARCELS = sdk.Need("PARCELS_API_URL", "the base URL of the parcel service")


@pytest.fixture(autouse=True)
def registry_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agents declared here leave the registry with the test."""
    for name in ("_AGENTS", "_SOURCES"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))


@pytest.fixture
def parcels_agent() -> registry.Agent:
    """An agent that needs PARCELS_API_URL (unset unless a test sets it)."""
    return sdk.register_agent(
        sdk.Agent(
            name="needs_parcels",
            description="Needs the parcel service.",
            system_prompt="Find parcels.",
            tools=["lookup_order"],
            plan=[sdk.PlanStep("Look up the order", "lookup_order")],
            needs=(PARCELS,),
        )
    )


@pytest.fixture
def starter(django_user_model: Any) -> Any:
    tess = django_user_model.objects.create_user(username="tess", password="pw-for-tests")
    tess.groups.add(Group.objects.get(name="task starters"))
    return tess


def without_services(settings: Any) -> None:
    """The shipped agents' services unset, as in production without AGENTOPS_SIM_BASE_URL."""
    settings.AGENTOPS = {**settings.AGENTOPS, "SIM_BASE_URL": ""}


def test_an_agent_whose_setting_is_unset_is_not_offered_and_its_start_names_it(
    parcels_agent, monkeypatch
):
    monkeypatch.delenv("PARCELS_API_URL", raising=False)

    assert [str(m) for m in agent_missing(parcels_agent)] == [
        "PARCELS_API_URL (the base URL of the parcel service), which is not set"
    ]
    assert "needs_parcels" not in [a.name for a in agents_offered()]
    with pytest.raises(AgentUnavailable) as refused:
        task_create(agent="needs_parcels", goal="Find the parcel of A1001")
    assert str(refused.value).startswith(
        "agent 'needs_parcels' cannot run here: it needs PARCELS_API_URL (the base URL of the "
        "parcel service), which is not set"
    )
    assert not Task.objects.exists()

    monkeypatch.setenv("PARCELS_API_URL", "   ")  # blanks are not a setting
    assert "needs_parcels" not in [a.name for a in agents_offered()]

    monkeypatch.setenv("PARCELS_API_URL", "https://parcels.example.com")
    assert agent_missing(parcels_agent) == []
    assert "needs_parcels" in [a.name for a in agents_offered()]
    assert task_create(agent="needs_parcels", goal="Find the parcel of A1001").agent == (
        "needs_parcels"
    )


def test_a_variable_the_engine_reads_is_read_as_the_settings_have_it(settings, monkeypatch):
    monkeypatch.setenv("AGENTOPS_SIM_BASE_URL", "http://elsewhere.example.com")
    settings.AGENTOPS = {**settings.AGENTOPS, "SIM_BASE_URL": "http://sim.example.com"}

    assert setting_value("AGENTOPS_SIM_BASE_URL") == "http://sim.example.com"
    assert setting_value("OPENAI_API_KEY") == settings.AGENTOPS["OPENAI_API_KEY"]

    without_services(settings)
    assert setting_value("AGENTOPS_SIM_BASE_URL") == ""
    assert [m.what for m in agent_missing(registry.get_agent("refund"))] == [
        "AGENTOPS_SIM_BASE_URL"
    ]


def test_the_shipped_agents_that_call_services_need_their_base_url(settings):
    without_services(settings)

    offered = {a.name for a in agents_offered()}
    missing = {a.name for a in registry.agents() if agent_missing(a)}

    assert {"refund", "refund_ask", "trip", "triage", "goodwill", "procurement"} <= missing
    assert "supplier_quote" in missing  # hidden, and a child of procurement: started by it
    assert not offered & missing
    assert "bench_noop" not in missing  # its tools run in-process


def test_a_stdio_mcp_server_whose_program_or_module_is_missing_is_named():
    absent_program = sdk.McpServer(name="nowhere", command=("agentops-no-such-program",))
    absent_module = sdk.McpServer(
        name="nomodule", command=(sys.executable, "-m", "agentops_no_such_module")
    )
    present = sdk.McpServer(name="present", command=(sys.executable, "-m", "json.tool"))
    agent = sdk.register_agent(
        sdk.Agent(
            name="needs_mcp",
            system_prompt="x",
            tools=[],
            plan=None,
            mcp_servers=(absent_program, absent_module, present),
        )
    )

    assert [str(m) for m in agent_missing(agent)] == [
        "MCP server 'nowhere' (the program agentops-no-such-program), which is not installed",
        "MCP server 'nomodule' (the Python module agentops_no_such_module), which is not installed",
    ]


def test_a_need_that_is_not_a_need_is_refused_when_the_agent_registers():
    with pytest.raises(ValueError, match="names an environment variable"):
        sdk.Need("not a variable", "x")
    with pytest.raises(ValueError, match="say what it is for"):
        sdk.Need("PARCELS_API_URL", " ")
    with pytest.raises(TypeError, match=r"needs= holds Need\(...\)s"):
        sdk.register_agent(
            sdk.Agent(
                name="needs_text",
                system_prompt="x",
                tools=[],
                plan=None,
                needs=("PARCELS_API_URL",),  # type: ignore[arg-type]
            )
        )


def test_the_start_form_leaves_out_and_refuses_an_agent_whose_needs_are_unset(
    client, starter, settings
):
    without_services(settings)
    signed_in(client, starter)

    page = client.get(reverse("agentops:task_new")).content.decode()
    posted = client.post(
        reverse("agentops:task_new"),
        {"agent": "refund", "goal": "Refund order A1001", "input": '{"order_id": "A1001"}'},
    )

    assert '<option value="refund">' not in page
    assert posted.status_code == 200
    assert "agent &#x27;refund&#x27; cannot run here: it needs AGENTOPS_SIM_BASE_URL" in (
        posted.content.decode()
    )
    assert not Task.objects.exists()


def test_the_api_lists_only_offered_agents_and_refuses_the_others(client, starter, settings):
    _, token = api_token_create(user=starter, name="start")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = {"agent": "refund", "goal": "Refund order A1001", "input": {"order_id": "A1001"}}

    listed = client.get("/api/v1/agents", **auth).json()
    assert "refund" in [a["name"] for a in listed]
    assert "bench_noop" not in [a["name"] for a in listed]  # hidden
    refund = next(a for a in listed if a["name"] == "refund")
    assert refund == {
        "name": "refund",
        "description": "Refund a customer's order and tell them.",
        "editable_input": ["amount", "reason"],
    }

    without_services(settings)
    listed = client.get("/api/v1/agents", **auth).json()
    refused = client.post("/api/v1/tasks", body, content_type="application/json", **auth)

    assert "refund" not in [a["name"] for a in listed]
    assert refused.status_code == 400
    assert refused.json()["detail"].startswith(
        "agent 'refund' cannot run here: it needs AGENTOPS_SIM_BASE_URL"
    )
    assert not Task.objects.exists()


def test_a_worker_without_the_setting_stops_the_task_naming_it(sim, settings, redis_clean):
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    without_services(settings)  # the worker that claims it is configured otherwise

    task_advance(task_id=task.pk, owner="test-worker")

    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.UNKNOWN_AGENT
    assert "it needs AGENTOPS_SIM_BASE_URL" in task.failure["message"]
    assert not task.steps.filter(status="succeeded").exists()


def test_the_deploy_check_names_each_agent_not_offered_and_what_it_lacks(
    parcels_agent, monkeypatch, settings
):
    monkeypatch.delenv("PARCELS_API_URL", raising=False)

    messages = agents_needs_check()

    named = {m.msg.split("'")[1]: m for m in messages}
    assert named["needs_parcels"].level == checks.INFO
    assert named["needs_parcels"].id == "agentops.I001"
    assert named["needs_parcels"].msg == (
        "agent 'needs_parcels' is not offered: it needs PARCELS_API_URL (the base URL of the "
        "parcel service), which is not set"
    )
    assert "refund" not in named  # the development default is set

    monkeypatch.setenv("PARCELS_API_URL", "https://parcels.example.com")
    assert "needs_parcels" not in {m.msg.split("'")[1] for m in agents_needs_check()}


def test_the_deploy_check_warns_of_metrics_and_email_settings_that_are_missing(
    settings, monkeypatch, tmp_path
):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.delenv("DJANGO_EMAIL_FILE_PATH", raising=False)
    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_TOKEN": ""}
    assert metrics_directory_check() == []
    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_TOKEN": "t0ken"}
    assert [m.id for m in metrics_directory_check()] == ["agentops.W002"]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "absent"))
    assert [m.id for m in metrics_directory_check()] == ["agentops.W001"]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics_directory_check() == []

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    assert email_file_path_check() == []
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    assert [m.id for m in email_file_path_check()] == ["agentops.W003"]
    monkeypatch.setenv("DJANGO_EMAIL_FILE_PATH", str(tmp_path))
    assert email_file_path_check() == []
