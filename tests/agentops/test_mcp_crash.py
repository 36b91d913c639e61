"""Crash tests of MCP calls: a real worker process running `mcp-server-git` (stdio, from PyPI)
is SIGKILLed around an approved commit, then another worker and the sweeper take over.

The commit is a write the default policy gates; its tool says it is not idempotent and the
server has no way to be asked whether a commit happened, so a call whose outcome was lost goes
to "did it happen?" (`executed_unknown`), never runs again by itself, and the repository ends
with exactly one new commit once a person answers.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission

from agentops.engine import ledger_confirm, task_create
from agentops.models import Gate, Task, ToolCall
from agentops.states import GateStatus, LedgerStatus, TaskStatus
from reviews.services import gate_approve
from tests.agentops.mcp_helpers import commits, git_repository
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

COMMIT_STEP = 1
# A worker starts its MCP server lazily: spawning it and the handshake take seconds on a busy
# machine, so the waits are generous.
WAIT = 120


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user(username="olga", password="x")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    user.user_permissions.add(Permission.objects.get(codename="decide_gate"))
    return user


def approved_commit(processes, operator, repo) -> Task:
    """A git task run by a real worker up to its commit's gate, then approved."""
    task = task_create(
        agent="mcp_git",
        goal="Commit the changelog",
        input={"repo_path": str(repo), "message": "Add the changelog"},
    )
    first = processes.worker(burst=True)
    assert first.wait(timeout=WAIT) == 0
    task.refresh_from_db()
    assert task.status == TaskStatus.AWAITING_APPROVAL, task.failure
    gate = Gate.objects.get(task=task, status=GateStatus.OPEN)
    assert gate.tool == "git__git_commit"
    gate_approve(gate_id=gate.pk, actor=operator, seen_digest=gate.args_digest)
    return task


def settle(processes, task: Task) -> Task:
    """A new worker and the sweeper run the task until it ends or stops for a person."""
    processes.worker()
    processes.sweeper()
    wait_for(
        lambda: (
            Task.objects.get(pk=task.pk).status
            in (TaskStatus.NEEDS_ATTENTION, TaskStatus.SUCCEEDED)
        ),
        timeout=WAIT,
        message="the task to end or stop after the takeover",
    )
    return Task.objects.get(pk=task.pk)


def answer(processes, task: Task, operator, *, executed: bool) -> Task:
    """A person answers "did it happen?"; the task runs to its end."""
    call = ToolCall.objects.get(task=task, tool="git__git_commit")
    assert call.status == LedgerStatus.EXECUTED_UNKNOWN
    ledger_confirm(call_id=call.pk, executed=executed, actor=operator, reason="checked git log")
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_terminal,
        timeout=WAIT,
        message="the task to finish after the answer",
    )
    return Task.objects.get(pk=task.pk)


def assert_did_it_happen(task: Task) -> None:
    assert task.status == TaskStatus.NEEDS_ATTENTION
    assert task.failure["kind"] == "side_effect_unknown", task.failure
    call = ToolCall.objects.get(task=task, tool="git__git_commit")
    assert call.status == LedgerStatus.EXECUTED_UNKNOWN


def test_a_worker_killed_during_the_commit_ends_in_did_it_happen_and_one_commit(
    processes, operator, tmp_path
):
    repo = git_repository(tmp_path / "repo")
    # The commit lands, then git runs this hook: the worker is killed while the call is open.
    marker = tmp_path / "committed"
    hook = repo / ".git" / "hooks" / "post-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 4\n")
    hook.chmod(0o755)
    task = approved_commit(processes, operator, repo)

    victim = processes.worker()
    wait_for(marker.exists, timeout=WAIT, message="the commit to land")
    victim.kill()
    victim.wait(timeout=10)
    assert ToolCall.objects.get(task=task, tool="git__git_commit").status == LedgerStatus.PENDING
    task = settle(processes, task)

    assert_did_it_happen(task)
    assert commits(repo) == 2
    task = answer(processes, task, operator, executed=True)
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert commits(repo) == 2
    assert ToolCall.objects.filter(task=task, tool="git__git_commit").count() == 1


def test_a_worker_killed_after_the_server_answered_ends_in_did_it_happen_and_one_commit(
    processes, operator, tmp_path
):
    repo = git_repository(tmp_path / "repo")
    task = approved_commit(processes, operator, repo)

    victim = processes.worker(crash_at=f"mcp_answered@{COMMIT_STEP}")
    assert victim.wait(timeout=WAIT) == -9
    assert commits(repo) == 2
    task = settle(processes, task)

    assert_did_it_happen(task)
    task = answer(processes, task, operator, executed=True)
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert commits(repo) == 2


def test_a_worker_killed_before_the_call_commits_once_after_the_person_says_it_did_not_happen(
    processes, operator, tmp_path
):
    repo = git_repository(tmp_path / "repo")
    task = approved_commit(processes, operator, repo)

    victim = processes.worker(crash_at=f"after_pending@{COMMIT_STEP}")
    assert victim.wait(timeout=WAIT) == -9
    task = settle(processes, task)

    assert_did_it_happen(task)
    assert commits(repo) == 1
    task = answer(processes, task, operator, executed=False)
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    assert commits(repo) == 2
    calls = ToolCall.objects.filter(task=task, tool="git__git_commit").order_by("id")
    assert [c.status for c in calls] == [LedgerStatus.FAILED, LedgerStatus.SUCCEEDED]
    assert len({c.idempotency_key for c in calls}) == 1


def test_demo_scenario_mcp_git_commits_once_after_an_approval(sim_server, redis_clean, monkeypatch):
    """`manage.py demo_scenario mcp-git --json`: real workers, the reference git server, an
    approval; one commit, every MCP call in the ledger."""
    import json
    from io import StringIO

    from django.core.management import call_command

    from tests.conftest import database_url

    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()

    call_command("demo_scenario", "mcp-git", "--json", "--timeout", str(WAIT), stdout=out)

    report = json.loads(out.getvalue())
    assert report["task_status"] == TaskStatus.SUCCEEDED, report["failure"]
    assert report["commits_made"] == 1
    assert report["mcp_calls"] == 3
    assert [(c["tool"], c["route"], c["status"]) for c in report["mcp_ledger"]] == [
        ("git__git_status", "auto", "succeeded"),
        ("git__git_commit", "gate", "succeeded"),
        ("git__git_log", "auto", "succeeded"),
    ]
