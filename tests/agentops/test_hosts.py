"""The product on several hosts: workers and sweepers on hosts of their own (agentops.dev.hosts:
network namespaces with their own hostname and pid space, reaching PostgreSQL, Redis and the
services over a link), and artifacts that every host reads (AGENTOPS_ARTIFACT_STORAGE=postgres).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command

from agentops.dev.benchmarks.checkpoint import BENCH_POLICY, bench_policy_ensure
from agentops.dev.hosts import Host, hosts_create, hosts_unavailable
from agentops.dev.sim.models import Effect
from agentops.engine import task_create
from agentops.engine.jsonvalues import loaded
from agentops.engine.model import loaded_response
from agentops.models import Artifact, Event, Step, StoredFile, Task, ToolCall
from agentops.states import LedgerStatus, TaskStatus
from agentops.tokens import api_token_create
from tests.agentops.test_deploy import _answers, _session_cookie
from tests.conftest import ROOT, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

DATABASE_STORAGE = {"BACKEND": "agentops.storage.DatabaseStorage"}


def test_workers_and_sweepers_on_two_hosts_keep_every_invariant_through_kills(redis_clean, capsys):
    assert hosts_unavailable() is None, "the several-hosts tier runs as root, as .ci/run does"
    call_command(
        "chaos", "--minutes", "1", "--workers", "2", "--tasks", "4", "--hosts", "2", "--json"
    )
    report = json.loads(capsys.readouterr().out)

    assert report["ok"] and report["settled"], report
    assert report["kills"] >= 1
    assert report["duplicate_effects"] == report["logical_duplicate_effects"] == 0
    assert report["lost_tasks"] == report["steps_completed_twice"] == 0
    assert report["task_statuses"].get(TaskStatus.SUCCEEDED, 0) >= 1, report["task_statuses"]
    assert set(report["hosts"]) == {"host-a", "host-b"}
    identities = [name for seen in report["hosts"].values() for name in seen["identities"]]
    for host, seen in report["hosts"].items():
        assert seen["claims"] >= 1
        assert all(identity.startswith(f"{host}:") for identity in seen["identities"]), seen
    # Every worker has the same pid on its host, as in containers; their tokens tell them apart,
    # and the killed ones' successors on the same host are new names.
    assert len({identity.split(":")[1] for identity in identities}) == 1, identities
    # A killed worker's successor is a new name; whether one was killed in the run's time
    # depends on the machine's load (the kills land on workers or the sweeper).
    assert len(set(identities)) == len(identities) >= 2
    assert report["tasks_on_several_hosts"] >= 1
    assert report["artifacts"] >= 1


def test_a_task_killed_on_one_host_resumes_on_another_with_the_artifacts_it_wrote(
    processes, tmp_path, settings
):
    """Each worker has a disk of its own (MEDIA_ROOT); the 300 KB proposal the first wrote as an
    artifact before it died is read by the second from PostgreSQL."""
    settings.STORAGES = {**settings.STORAGES, "default": DATABASE_STORAGE}
    bench_policy_ensure()
    task = task_create(
        agent="bench_noop",
        goal="big",
        input={"steps": 2, "payload_kb": 300, "kind": "effect"},
        policy=BENCH_POLICY,
    )
    on_host = {"AGENTOPS_ARTIFACT_STORAGE": "postgres"}
    victim = processes.worker(
        crash_at="after_model_result@1",
        extra_env={**on_host, "AGENTOPS_MEDIA_ROOT": str(tmp_path / "host-a")},
    )
    assert processes.finished(victim, timeout=60) == -9
    assert ToolCall.objects.get(task=task, step__ordinal=1).status == LedgerStatus.PENDING
    written = set(StoredFile.objects.values_list("name", flat=True))
    assert written == set(Artifact.objects.filter(task=task).values_list("name", flat=True))

    other = processes.worker(extra_env={**on_host, "AGENTOPS_MEDIA_ROOT": str(tmp_path / "host-b")})
    sweeper = processes.sweeper()  # it finds the task whose holder died and enqueues it again
    with processes.logs_on_failure(other, sweeper):
        wait_for(
            lambda: Task.objects.get(pk=task.pk).is_terminal,
            timeout=120,
            message="the second worker to finish the task",
        )

    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    step = Step.objects.get(task=task, ordinal=1)
    proposed = loaded_response(step.model_response)["tool_calls"][0]["arguments"]
    assert len(proposed["payload"]) == 300 * 1024
    assert loaded(step.output) == {"n": 1, "payload": proposed["payload"]}
    assert not (tmp_path / "host-a").exists() and not (tmp_path / "host-b").exists()


@pytest.fixture
def two_hosts() -> Iterator[list[Host]]:
    assert hosts_unavailable() is None, "the several-hosts tier runs as root, as .ci/run does"
    hosts = hosts_create(["host-a", "host-b"])
    yield hosts
    for host in hosts:
        host.remove()


WEB = [sys.executable, "-m", "gunicorn", "-c", "python:agentops.gunicorn_conf", "agentops.wsgi"]
WORKER = [sys.executable, str(ROOT / "manage.py"), "worker"]
SWEEPER = [sys.executable, str(ROOT / "manage.py"), "sweeper", "--interval", "0.3"]


def test_a_task_started_on_one_hosts_web_is_held_on_the_other_and_taken_over_across_hosts(
    processes, two_hosts, tmp_path, django_user_model
):
    """Web, workers and sweepers on two hosts: a task started through host-b's API is claimed
    by a worker on host-a, which freezes there; host-b's page names host-a's process as its
    holder (the name that worker logged), and once the lease runs out a worker on host-b
    finishes the task, each effect once."""
    a, b = two_hosts
    operator = django_user_model.objects.create_user(username="olga", password="x")
    for group in ("operators", "task starters"):
        operator.groups.add(Group.objects.get_or_create(name=group)[0])
    _, token = api_token_create(user=operator, name="hosts")
    cookie = _session_cookie(operator)
    common = {
        "AGENTOPS_ARTIFACT_STORAGE": "postgres",
        "DJANGO_ALLOWED_HOSTS": f"{a.address},{b.address}",
        "GUNICORN_ACCESS_LOG": "0",
        "WEB_CONCURRENCY": "1",
    }

    def on(host: Host, command: list[str], name: str, **env: str) -> subprocess.Popen[bytes]:
        return processes.start_on(
            host,
            command,
            extra_env={**common, "AGENTOPS_MEDIA_ROOT": str(tmp_path / host.name), **env},
            name=f"{name}-{host.name}",
        )

    for host in (a, b):
        on(host, WEB, "web", GUNICORN_BIND=f"{host.address}:8000")
    frozen = on(
        a, WORKER, "worker", AGENTOPS_CRASH_AT="after_claim", AGENTOPS_CRASH_SIGNAL="SIGSTOP"
    )
    for host in (a, b):
        wait_for(
            lambda host=host: _answers(f"http://{host.address}:8000/healthz"),
            timeout=300,
            message=f"the web on {host.name} to answer",
        )

    started = httpx.post(
        f"http://{b.address}:8000/api/v1/tasks",
        json={"agent": "refund", "goal": "Refund order A1001", "input": {"order_id": "A1001"}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert started.status_code == 201, started.text
    task_id = started.json()["id"]
    with processes.logs_on_failure(frozen):
        wait_for(
            lambda: (Task.objects.get(pk=task_id).lease_owner or "").startswith("host-a:"),
            timeout=120,
            message="the worker on host-a to claim the task",
        )
    holder = Task.objects.get(pk=task_id).lease_owner
    page = httpx.get(
        f"http://{b.address}:8000/tasks/{task_id}", cookies={"sessionid": cookie}, timeout=30
    )
    assert page.status_code == 200 and "<code title=" in page.text
    assert f">{holder}</code>" in page.text
    identity = holder.rsplit(":", 1)[0]  # host:pid:token, then the job
    assert f"worker {identity} takes the queues default" in processes.log(frozen)

    taking_over = [on(b, WORKER, "worker"), on(a, SWEEPER, "sweeper"), on(b, SWEEPER, "sweeper")]
    with processes.logs_on_failure(*taking_over):
        wait_for(
            lambda: Task.objects.get(pk=task_id).is_terminal,
            timeout=120,
            message="the worker on host-b to finish the task",
        )
    os.killpg(frozen.pid, signal.SIGKILL)

    task = Task.objects.get(pk=task_id)
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    owners = list(
        Event.objects.filter(task=task, action="agentops.task.claimed")
        .order_by("seq")
        .values_list("payload__owner", flat=True)
    )
    assert owners[0] == holder and owners[-1].startswith("host-b:"), owners
    assert identity.split(":")[1] == owners[-1].split(":")[1]  # the same pid on both hosts
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    assert Effect.objects.filter(service="email", operation="send").count() == 1
    seen_on_a = httpx.get(
        f"http://{a.address}:8000/api/v1/tasks/{task_id}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert seen_on_a.json()["status"] == TaskStatus.SUCCEEDED
