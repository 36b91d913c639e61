"""The product on several hosts: workers and sweepers on hosts of their own (agentops.dev.hosts:
network namespaces with their own hostname and pid space, reaching PostgreSQL, Redis and the
services over a link), and artifacts that every host reads (AGENTOPS_ARTIFACT_STORAGE=postgres).
"""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from agentops.dev.benchmarks.checkpoint import BENCH_POLICY, bench_policy_ensure
from agentops.dev.hosts import hosts_unavailable
from agentops.engine import task_create
from agentops.engine.jsonvalues import loaded
from agentops.engine.model import loaded_response
from agentops.models import Artifact, Step, StoredFile, Task, ToolCall
from agentops.states import LedgerStatus, TaskStatus
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

DATABASE_STORAGE = {"BACKEND": "agentops.storage.DatabaseStorage"}


def test_workers_and_sweepers_on_two_hosts_keep_every_invariant_through_kills(redis_clean, capsys):
    assert hosts_unavailable() is None, "the several-hosts tier runs as root, as .ci/run does"
    call_command(
        "chaos", "--minutes", "0.5", "--workers", "2", "--tasks", "4", "--hosts", "2", "--json"
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
        assert all(identity.startswith(f"{host}:1:") for identity in seen["identities"]), seen
    # Every worker is pid 1 on its host, as in containers; their tokens tell them apart, and the
    # killed ones' successors on the same host are new names.
    assert len(set(identities)) == len(identities) >= 3
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
