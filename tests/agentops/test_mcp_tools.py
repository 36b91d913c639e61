"""MCP tools under the ledger and the policy, against real servers: the reference
`mcp-server-time` and `mcp-server-git` from PyPI, and the notes server of tests/ (the official
SDK's `MCPServer`), each a real process spoken to over stdio (or streamable HTTP)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from django.contrib.auth.models import Group, Permission

from agentops.agents.mcpdemo import GIT
from agentops.engine import task_create
from agentops.engine.errors import FailureKind
from agentops.engine.jsonvalues import loaded
from agentops.engine.mcpclient import connections
from agentops.engine.mcptools import discover, forget_discovered
from agentops.models import Event, Gate, Step, Task, ToolCall
from agentops.selectors import task_get_recovery
from agentops.states import GateStatus, LedgerStatus, StepStatus, TaskStatus
from policies import catalog
from policies.services import (
    policy_create,
    policy_draft_create,
    policy_publish,
    policy_rule_add,
)
from reviews.services import gate_approve
from tests.agentops.mcp_helpers import (
    NOTES,
    NOTES_FILE,
    OFFERED,
    REVOKED_TOKEN,
    SCHEMA_FILE,
    commits,
    git_repository,
    notes_written,
    server_pids,
)
from tests.builders import run_until_parked_or_done
from tests.library_words import jsonschema_says

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_servers(settings):
    """Each test starts and ends with no MCP server running and nothing listed. The lease is
    long: in these rollback-isolated tests the lease's heartbeat (another connection) cannot
    see the task's row, and a server's start, inside the call it serves, can outlast a beat on
    a busy machine (the crash tests run real workers with short leases)."""
    settings.AGENTOPS = {**settings.AGENTOPS, "LEASE_SECONDS": 600.0}
    NOTES_FILE.unlink(missing_ok=True)
    SCHEMA_FILE.unlink(missing_ok=True)
    OFFERED.clear()
    connections.close_all()
    connections.starts.clear()
    forget_discovered()
    yield
    connections.close_all()
    forget_discovered()


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user(username="olga", password="x")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    user.user_permissions.add(Permission.objects.get(codename="decide_gate"))
    return user


def notes_policy(*rules: dict) -> str:
    """A published policy named `notes`: the given rules before the default (a gate)."""
    policy = policy_create(name="notes")
    draft = policy_draft_create(policy=policy, author=None)
    for fields in [
        *rules,
        {
            "name": "default",
            "route": "gate",
            "is_default": True,
            "approver_group": "operators",
            "timeout_seconds": 3600,
        },
    ]:
        policy_rule_add(draft=draft, author=None, fields=fields)
    policy_publish(draft=draft, author=None, change_note="test")
    return "notes"


def notes_task(*calls: tuple[str, dict], policy: str = "default") -> Task:
    return task_create(
        agent="mcp_notes_test",
        goal="Keep notes",
        input={"calls": [list(call) for call in calls]},
        policy=policy,
    )


# -- mcp-server-time: read-only, auto lane ---------------------------------------------------------


def test_the_time_server_is_discovered_and_its_read_only_tools_run_in_the_auto_lane():
    task = run_until_parked_or_done(
        task_create(agent="mcp_time", goal="What time is it?", input={"timezone": "Europe/Paris"})
    )

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    assert [(s.route, s.policy_rule) for s in steps] == [("auto", "read"), ("auto", "read")]
    calls = list(ToolCall.objects.filter(task=task).order_by("id"))
    assert [(c.tool, c.side_effect, c.status) for c in calls] == [
        ("time__get_current_time", "read", LedgerStatus.SUCCEEDED),
        ("time__convert_time", "read", LedgerStatus.SUCCEEDED),
    ]
    now = loaded(calls[0].result)
    assert now["structured"]["timezone"] == "Europe/Paris"
    assert now["content"][0]["type"] == "text"
    assert loaded(calls[1].result)["structured"]["target"]["timezone"] == "Asia/Tokyo"
    # Each step records the schema digest (and the definition) of the tool it proposed.
    for step in steps:
        record = step.spec["tool_schema"]
        assert record["server"] == "time" and len(record["digest"]) == 64
        assert record["hints"]["readOnlyHint"] is True and "readOnlyHint" in record["hinted"]
        assert record["definition"]["inputSchema"]["type"] == "object"
    # A read is recorded once, after it ran: its one ledger event carries the routing.
    recorded = Event.objects.filter(task=task, action="agentops.ledger.succeeded").order_by("seq")
    assert [e.payload["schema_digest"] for e in recorded] == [
        s.spec["tool_schema"]["digest"] for s in steps
    ]
    assert not Event.objects.filter(task=task, action="agentops.ledger.pending").exists()
    # The server was started once, lazily, for the whole task.
    assert connections.starts["time"] == 1


# -- mcp-server-git: writes gated, an approved commit lands once -------------------------------


def test_git_writes_are_gated_by_the_default_policy_and_an_approved_commit_lands_once(
    tmp_path, operator
):
    repo = git_repository(tmp_path / "repo")
    task = task_create(
        agent="mcp_git",
        goal="Commit the changelog",
        input={"repo_path": str(repo), "message": "Add the changelog"},
    )
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.AWAITING_APPROVAL
    gate = Gate.objects.get(task=task, status=GateStatus.OPEN)
    assert (gate.tool, gate.rule) == ("git__git_commit", "default")
    assert Step.objects.get(task=task, ordinal=0).route == "auto"  # git_status: a read
    assert commits(repo) == 1 and not ToolCall.objects.filter(tool="git__git_commit").exists()

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert commits(repo) == 2
    commit = ToolCall.objects.get(task=task, tool="git__git_commit")
    assert (commit.status, commit.side_effect) == (LedgerStatus.SUCCEEDED, "write")
    log = loaded(ToolCall.objects.get(task=task, tool="git__git_log").result)
    assert "Add the changelog" in log["content"][0]["text"]
    # A second run of the finished task changes nothing.
    run_until_parked_or_done(task)
    assert commits(repo) == 2


def test_git_tools_take_their_class_and_lane_from_their_annotations():
    from agentops.engine.routing import route_action
    from policies import catalog

    tools = discover(GIT)
    task = task_create(agent="mcp_git", goal="g", input={})

    def lane(name: str) -> tuple[str, str, bool]:
        verdict = route_action(task=task, action=catalog.action_for(tool=name))
        return tools[name].side_effect, verdict.route, tools[name].idempotent_remote

    assert lane("git__git_status") == ("read", "auto", True)
    assert lane("git__git_log") == ("read", "auto", True)
    assert lane("git__git_commit") == ("write", "gate", False)
    assert lane("git__git_create_branch") == ("write", "gate", False)
    assert lane("git__git_add") == ("write", "gate", True)  # idempotentHint: asked again safely
    assert lane("git__git_reset") == ("destructive", "gate", True)  # destructiveHint
    assert tools["git__git_reset"].hints["destructiveHint"] is True
    assert tools["git__git_commit"].systems == ("git",)


def test_absent_annotations_take_the_conservative_default_and_the_policy_overrides_per_tool():
    tools = discover(NOTES)
    slow = tools["notes__slow_note"]
    # Not read-only and destructive, by the MCP defaults.
    assert slow.hinted == () and slow.side_effect == "destructive" and not slow.idempotent_remote
    assert slow.hints == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    assert tools["notes__count_notes"].side_effect == "read"

    policy = notes_policy(
        {"name": "notes may be added", "route": "auto", "tools": ["notes__add_note"]}
    )
    task = run_until_parked_or_done(
        notes_task(
            ("notes__add_note", {"text": "one"}),
            ("notes__slow_note", {"text": "x", "seconds": 0}),
            policy=policy,
        )
    )

    assert task.status == TaskStatus.AWAITING_APPROVAL
    routed = dict(Step.objects.filter(task=task).values_list("ordinal", "policy_rule"))
    assert routed == {0: "notes may be added", 1: "default"}
    assert notes_written() == ["one"]


def test_a_policy_gates_destructive_tools_while_other_writes_run_autonomously(operator):
    policy = notes_policy(
        {
            "name": "destructive waits",
            "route": "gate",
            "side_effects": ["destructive"],
            "approver_group": "operators",
            "timeout_seconds": 3600,
        },
        {"name": "writes run", "route": "auto", "side_effects": ["write"]},
    )
    task = run_until_parked_or_done(
        notes_task(("notes__add_note", {"text": "one"}), ("notes__clear_notes", {}), policy=policy)
    )

    assert task.status == TaskStatus.AWAITING_APPROVAL
    gate = Gate.objects.get(task=task, status=GateStatus.OPEN)
    assert (gate.tool, gate.rule) == ("notes__clear_notes", "destructive waits")
    added = ToolCall.objects.get(task=task)
    assert (added.tool, added.side_effect, added.status) == (
        "notes__add_note",
        "write",
        LedgerStatus.SUCCEEDED,
    )
    assert Step.objects.get(task=task, ordinal=0).policy_rule == "writes run"
    assert notes_written() == ["one"]  # the write ran; the erase waits for a person

    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    erased = ToolCall.objects.get(task=task, tool="notes__clear_notes")
    assert (erased.side_effect, erased.status) == ("destructive", LedgerStatus.SUCCEEDED)
    assert notes_written() == []


def test_the_ledger_says_why_asking_an_mcp_tool_again_is_safe_without_claiming_a_key():
    from agentops.engine.errors import ToolFailure
    from agentops.engine.ledger import reconcile
    from agentops.engine.registry import Tool, ToolContext

    tools = discover(NOTES)
    ctx = ToolContext("k", task_id=0, step=0, http=None, base_url="", timeout=5)  # type: ignore[arg-type]

    def how(tool) -> str:
        lost = ToolFailure("the answer was lost", kind=FailureKind.TIMEOUT, retryable=True)
        outcome = reconcile(tool, ctx, {}, cause=lost)
        assert outcome.status == LedgerStatus.FAILED and outcome.failure.retryable
        return outcome.how

    # MCP carries no idempotency key: a read is asked again because it reads, an idempotent
    # tool because its server says a repeat changes nothing.
    assert how(tools["notes__count_notes"]) == "the tool only reads: asked again"
    assert how(tools["notes__clear_notes"]) == (
        "the server marks the tool idempotent (idempotentHint): asked again"
    )
    # A Python tool whose remote honours the key keeps saying so.
    keyed = Tool(name="keyed", fn=lambda ctx: {}, side_effect="write", idempotent_remote=True)
    assert how(keyed) == "remote deduplicates by key"


# -- a server that fails alone ---------------------------------------------------------------------


def two_servers_task(*calls: tuple[str, dict], policy: str, model_chooses: bool = False) -> Task:
    return task_create(
        agent="mcp_two_servers_test",
        goal="Keep notes",
        input={"calls": [list(call) for call in calls], "model_chooses": model_chooses},
        policy=policy,
    )


def test_a_step_lists_only_its_tools_server_so_a_server_that_cannot_start_stops_nothing_else():
    policy = notes_policy({"name": "all notes", "route": "auto", "systems": ["notes"]})
    task = run_until_parked_or_done(
        two_servers_task(
            ("notes__add_note", {"text": "one"}), ("notes__count_notes", {}), policy=policy
        )
    )

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert notes_written() == ["one"]
    # Each step was offered the tools of its tool's server, and the archive was never started.
    assert len(OFFERED) == 2
    assert all({name.split("__")[0] for name in offered} == {"notes"} for offered in OFFERED)
    assert connections.starts == {"notes": 1}


def test_a_step_the_model_chooses_for_is_offered_the_tools_of_the_servers_that_answer():
    policy = notes_policy({"name": "all notes", "route": "auto", "systems": ["notes"]})
    task = run_until_parked_or_done(
        two_servers_task(("notes__add_note", {"text": "one"}), policy=policy, model_chooses=True)
    )

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert notes_written() == ["one"]
    # Both servers were listed for the step; the one that failed to start left out only its
    # own tools.
    assert connections.starts == {"notes": 1, "archive": 1}
    (offered,) = OFFERED
    assert "notes__add_note" in offered
    assert not [name for name in offered if not name.startswith("notes__")]


def test_a_step_that_needs_a_server_that_cannot_start_stops_with_the_servers_own_words(
    operator, client, caplog
):
    policy = notes_policy({"name": "all notes", "route": "auto", "systems": ["notes", "archive"]})
    task = run_until_parked_or_done(
        two_servers_task(
            ("notes__add_note", {"text": "one"}),
            ("archive__add_note", {"text": "two"}),
            policy=policy,
        )
    )

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert notes_written() == ["one"]  # the step before it ran
    failure = task.failure
    assert failure["kind"] == FailureKind.UNAVAILABLE
    # What the server wrote on its stderr, its credential redacted, is in the stop's message.
    said = "notes: the token [redacted] was revoked; not starting"
    assert "MCP server archive failed to start" in failure["message"]
    assert said in failure["message"]
    assert REVOKED_TOKEN not in str(failure)
    # The worker's log has the server's words too (each stderr line, and the failure), redacted.
    assert said in caplog.text and REVOKED_TOKEN not in caplog.text
    step = Step.objects.get(task=task, ordinal=1)
    # No model call was made for the step, nothing reached the ledger; each try started the
    # server once (a server that failed to start is not started again at once).
    assert step.model_response is None
    assert ToolCall.objects.filter(task=task).count() == 1
    assert step.attempts == task.step_retry_cap
    assert connections.starts == {"notes": 1, "archive": step.attempts}
    # The operator reads it on the recovery panel.
    client.force_login(operator)
    page = client.get(f"/review/tasks/{task.pk}/recover").content.decode()
    assert said in page and REVOKED_TOKEN not in page


def test_a_tool_the_model_chose_from_a_server_that_could_not_be_listed_stops_with_its_words():
    policy = notes_policy({"name": "all notes", "route": "auto", "systems": ["notes", "archive"]})
    task = run_until_parked_or_done(
        two_servers_task(("archive__add_note", {"text": "x"}), policy=policy, model_chooses=True)
    )

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.UNAVAILABLE
    assert "notes: the token [redacted] was revoked; not starting" in task.failure["message"]
    # The archive's tools were not offered; proposing one anyway needs the archive.
    assert OFFERED and not [n for offered in OFFERED for n in offered if n.startswith("archive__")]
    assert not ToolCall.objects.filter(task=task).exists()


# -- arguments, errors, deadlines, restarts -------------------------------------------------------


def test_arguments_are_checked_against_the_tools_input_schema():
    from agentops.engine.errors import ModelFailure

    tool = discover(NOTES)["notes__add_note"]
    tool.check_arguments({"text": "ok"})
    with pytest.raises(ModelFailure) as refused:
        tool.check_arguments({"text": 3})
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    assert f"arguments.text: {jsonschema_says(schema, {'text': 3})}" in str(refused.value)
    assert refused.value.kind == FailureKind.OUTPUT_INVALID
    with pytest.raises(ModelFailure) as missing:
        tool.check_arguments({})
    assert jsonschema_says(schema, {}) in str(missing.value)


def test_a_tool_that_answers_is_error_fails_its_step_without_an_effect():
    policy = notes_policy({"name": "all notes", "route": "auto", "systems": ["notes"]})
    discover(NOTES)
    task = run_until_parked_or_done(notes_task(("notes__fail_note", {"text": "x"}), policy=policy))

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.TOOL_ERROR
    assert "notes are closed: x" in task.failure["message"]
    assert ToolCall.objects.get(task=task).status == LedgerStatus.FAILED


# How long the slow note takes: far past the server's 3 s deadline, so a step that returns
# sooner was cut off by the deadline, however slow the machine.
SLOW_NOTE_SECONDS = 60


def test_a_call_past_its_deadline_of_a_non_idempotent_tool_asks_did_it_happen():
    policy = notes_policy({"name": "all notes", "route": "auto", "systems": ["notes"]})
    discover(NOTES)
    started = time.monotonic()
    task = run_until_parked_or_done(
        notes_task(
            ("notes__slow_note", {"text": "late", "seconds": SLOW_NOTE_SECONDS}), policy=policy
        )
    )
    took = time.monotonic() - started

    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == FailureKind.SIDE_EFFECT_UNKNOWN
    assert ToolCall.objects.get(task=task).status == LedgerStatus.EXECUTED_UNKNOWN
    assert task_get_recovery(task_id=task.pk).action == "confirm"
    # Without the deadline the step would have waited the note out; with it, it stops after
    # 3 s plus the overhead of starting the server and the task, which a loaded machine stretches.
    assert took < SLOW_NOTE_SECONDS, "the call was held to the server's 3 s deadline"
    # The timed-out server was closed: the next request starts it afresh.
    discover(NOTES)
    assert connections.starts["notes"] == 2


def test_a_server_that_died_is_started_again_on_the_next_request():
    discover(NOTES)
    (pid,) = server_pids()
    os.kill(pid, signal.SIGKILL)
    policy = notes_policy({"name": "all notes", "route": "auto", "systems": ["notes"]})

    task = run_until_parked_or_done(
        notes_task(("notes__add_note", {"text": "after"}), policy=policy)
    )

    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert notes_written() == ["after"]
    assert connections.starts["notes"] == 2
    assert server_pids() != [pid]


def test_servers_are_closed_on_exit():
    discover(NOTES)
    assert len(server_pids()) == 1

    connections.close_all()

    assert server_pids() == []


# -- a schema that changes mid-task --------------------------------------------------------------


def test_a_tool_changed_after_its_call_was_approved_is_not_called_and_the_change_is_named(
    operator,
):
    policy = notes_policy(
        {"name": "first note", "route": "auto", "systems": ["notes"], "step_at_most": 0}
    )
    discover(NOTES)
    task = run_until_parked_or_done(
        notes_task(
            ("notes__add_note", {"text": "one"}),
            ("notes__add_note", {"text": "two"}),
            policy=policy,
        )
    )
    assert task.status == TaskStatus.AWAITING_APPROVAL and notes_written() == ["one"]
    gate = Gate.objects.get(task=task, status=GateStatus.OPEN)
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)

    # The server is upgraded while the task waits: it now requires a `pinned` argument.
    SCHEMA_FILE.write_text("2")
    for pid in server_pids():
        os.kill(pid, signal.SIGKILL)
    task = run_until_parked_or_done(task)

    assert task.status == TaskStatus.NEEDS_ATTENTION
    failure = task.failure
    assert failure["kind"] == FailureKind.TOOL_SCHEMA_CHANGED
    assert "argument 'pinned' added" in failure["message"]
    assert "argument 'pinned' is now required" in failure["detail"]["changes"]
    before = Step.objects.get(task=task, ordinal=0).spec["tool_schema"]["digest"]
    assert failure["detail"]["recorded_digest"] == before != failure["detail"]["current_digest"]
    assert notes_written() == ["one"]  # the approved call was never sent
    assert ToolCall.objects.get(task=task, step__ordinal=1).status == LedgerStatus.FAILED
    assert Step.objects.get(task=task, ordinal=1).status == StepStatus.FAILED
    recovery = task_get_recovery(task_id=task.pk)
    assert (recovery.rule, recovery.action) == ("tool-schema-changed", "abort")


# -- streamable HTTP -----------------------------------------------------------------------------


def test_a_server_at_a_streamable_http_url_is_used_the_same_way(tmp_path):
    import socket
    import subprocess
    import sys

    from agentops.engine.mcptools import McpServer
    from agentops.engine.registry import ToolContext
    from tests.agentops.mcp_helpers import NOTES_SERVER

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    notes = tmp_path / "web-notes.txt"
    server = subprocess.Popen(
        [sys.executable, str(NOTES_SERVER), "http", str(port)],
        env={**os.environ, "NOTES_FILE": str(notes)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        web = McpServer(name="webnotes", url=f"http://127.0.0.1:{port}/mcp", start_timeout=20)
        # Until the server listens: a Python process importing the MCP SDK, which a loaded
        # machine can take tens of seconds to start (the bound only stops a server that never does).
        deadline = time.monotonic() + 180
        while True:
            try:
                tools = discover(web)
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.3)
        ctx = ToolContext("k", task_id=0, step=0, http=None, base_url="", timeout=5)  # type: ignore[arg-type]
        result = tools["webnotes__add_note"].fn(ctx, text="over http")
    finally:
        server.kill()
        server.wait()

    assert result["structured"] == {"result": "note 1 added"}
    assert notes.read_text() == "over http\n"
    assert tools["webnotes__count_notes"].side_effect == "read"


# -- the web tier: tools from their records, no server ---------------------------------------------


def test_the_gate_of_an_mcp_call_is_read_and_edited_from_the_record_without_a_server(
    tmp_path, operator, client
):
    from agentops.engine import registry
    from reviews.services import gate_edit_and_approve
    from reviews.services.gates import ReviewError

    repo = git_repository(tmp_path / "repo")
    task = run_until_parked_or_done(
        task_create(
            agent="mcp_git", goal="Commit", input={"repo_path": str(repo), "message": "Changes"}
        )
    )
    gate = Gate.objects.get(task=task, status=GateStatus.OPEN)
    # A web process has listed nothing and starts no server: it reads the recorded tool.
    connections.close_all()
    connections.starts.clear()

    def forget_git_tools() -> None:
        for name in [n for n in registry._TOOLS if n.startswith("git__")]:
            del registry._TOOLS[name], registry._TOOL_ENTRIES[name]

    forget_git_tools()

    client.force_login(operator)
    page = client.get(f"/review/gates/{gate.pk}")
    assert page.status_code == 200
    assert "git__git_commit" in page.content.decode()
    wrong_type = jsonschema_says({"type": "string"}, 5)
    with pytest.raises(ReviewError, match=re.escape(f"arguments.message: {wrong_type}")):
        gate_edit_and_approve(
            gate_id=gate.pk,
            actor=operator,
            seen_digest=gate.args_digest,
            arguments={"repo_path": str(repo), "message": 5},
            reason="typo",
        )
    gate_edit_and_approve(
        gate_id=gate.pk,
        actor=operator,
        seen_digest=gate.args_digest,
        arguments={"repo_path": str(repo), "message": "Add the changelog (edited)"},
        reason="clearer message",
    )
    assert registry.get_tool("git__git_commit").side_effect == "write"
    # The policy editor knows the recorded tools of the server (and no others).
    forget_git_tools()
    known = catalog.known_tools()
    assert known["git__git_commit"].side_effect == "write"
    assert known["git__git_status"].systems == ("git",)
    assert "git__git_add" not in known
    notes_policy({"name": "commits audited", "route": "audit", "tools": ["git__git_commit"]})
    assert connections.starts == {}

    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert commits(repo) == 2
    assert (
        "(edited)"
        in loaded(ToolCall.objects.get(task=task, tool="git__git_log").result)["content"][0]["text"]
    )
