from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from rq.worker import Worker

from agentops.models import Event, Step, Task, ToolCall
from agentops.plumbing import queues
from agentops.states import TaskStatus

pytestmark = pytest.mark.django_db(transaction=True)

FIGURES = (
    "per_step_ms",
    "floor_per_step_ms",
    "ratio_to_floor",
    "bytes_per_step_first",
    "bytes_per_step_last",
    "commits_per_step",
    "statements_per_step",
    "fpi_bytes_per_step_first",
    "fpi_bytes_per_step_last",
    "step_bytes_per_step_first",
    "step_bytes_per_step_last",
)


def run_bench(*options: str) -> tuple[dict, list[tuple[int, str, int]]]:
    """Run the command, and record what its tasks looked like before it deleted them."""
    seen: list[tuple[int, str, int]] = []

    def snapshot_tasks(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        # The clean-up's first DELETE (children go first): the tasks are still whole.
        if sql.startswith('DELETE FROM "agentops_') and not seen:
            seen.extend(
                (t.pk, t.status, t.steps.filter(status="succeeded").count())
                for t in Task.objects.filter(agent="bench_noop")
            )
        return execute(sql, params, many, context)

    out = StringIO()
    with connection.execute_wrapper(snapshot_tasks):
        call_command(
            "bench",
            "checkpoint",
            "--steps",
            "3",
            "--payload-kb",
            "1",
            "--repeat",
            "1",
            "--json",
            *options,
            stdout=out,
        )
    return json.loads(out.getvalue()), seen


def test_bench_checkpoint_reports_every_figure_as_a_number(redis_clean):
    report, _ = run_bench()

    missing = [key for key in FIGURES if not isinstance(report.get(key), (int, float))]
    assert missing == []
    assert report["steps"] == 3
    assert report["repeat"] == 1
    # The tool only reads: one commit per step (its completion, with its model result and
    # call), plus the claim and the first step's start: 5 commits for 3 steps, from the WAL.
    assert report["kind"] == "read"
    assert report["commits_per_step"] == pytest.approx(5 / 3, abs=0.01)
    assert report["runs"][0]["hook_commits"] == report["runs"][0]["wal_commits"] == 5
    assert report["runs"][0]["interval_steps"] == [3, 3]


def test_bench_checkpoint_reports_each_kind_of_step_against_the_same_floor(redis_clean):
    report, seen = run_bench("--kind", "read,effect,reply")

    kinds = report["kinds"]
    assert list(kinds) == ["read", "effect", "reply"]
    # A side effect commits its pending row before it runs: two commits a step; a read or a
    # text reply one. Plus the claim and the first step's start.
    commits = {kind: figures["runs"][0]["wal_commits"] for kind, figures in kinds.items()}
    assert commits == {"read": 5, "effect": 8, "reply": 5}
    assert {k: f["target_ratio_to_floor"] for k, f in kinds.items()} == {
        "read": 5.0,
        "effect": 8.0,
        "reply": 5.0,
    }
    floors = {f["runs"][0]["floor_ms_per_step"] for f in kinds.values()}
    assert len(floors) == 1, "each kind's pair shares the floor run"
    # A warm-up and a measured task of each kind, all three steps done.
    assert len(seen) == 6 and all(steps == 3 for _, _, steps in seen)


def test_bench_checkpoint_refuses_an_unknown_kind():
    with pytest.raises(CommandError, match="--kind takes one or more of read, effect, reply"):
        call_command("bench", "checkpoint", "--kind", "write")


def test_bench_checkpoint_tasks_succeed_and_are_cleaned_up(redis_clean):
    _, seen = run_bench()

    # A warm-up task and one measured task, each with all three steps done.
    assert len(seen) == 2
    assert all(status == TaskStatus.SUCCEEDED and done == 3 for _, status, done in seen)
    ids = [pk for pk, _, _ in seen]
    assert not Task.objects.filter(pk__in=ids).exists()
    assert not Step.objects.filter(task_id__in=ids).exists()
    assert not ToolCall.objects.filter(task_id__in=ids).exists()
    assert not Event.objects.filter(task_id__in=ids).exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('agentops_bench_floor')")
        assert cursor.fetchone() == (None,)


def _peer_databases() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            [connection.settings_dict["NAME"].replace("_", "\\_") + "\\_peer\\_%"],
        )
        return [name for (name,) in cursor.fetchall()]


def test_bench_checkpoint_runs_the_same_steps_through_each_peer(redis_clean):
    # The peers' virtualenv comes with `make test` (make peers-venv).
    out = StringIO()
    call_command(
        "bench",
        "checkpoint",
        *("--steps", "3", "--payload-kb", "1", "--repeat", "2", "--json", "--peers"),
        stdout=out,
    )
    report = json.loads(out.getvalue())

    pins = (settings.BASE_DIR / "agentops/dev/benchmarks/peers-requirements.txt").read_text()
    assert [peer["peer"] for peer in report["peers"]] == ["langgraph", "langgraph-delta", "dbos"]
    for peer in report["peers"]:
        for package in peer["version"].split(", "):
            name, version = package.split()
            assert re.search(rf"^{re.escape(name)}=={re.escape(version)}\s", pins, re.MULTILINE)
        # One pair per repeat (the warm-up is not kept), each a positive time and floor.
        assert len(peer["runs"]) == 2
        assert all(run["task_ms_per_step"] > 0 for run in peer["runs"])
        assert all(run["floor_ms_per_step"] > 0 for run in peer["runs"])
    best = min(report["peers"], key=lambda peer: peer["ratio_to_floor"])
    assert report["best_peer"] == best["peer"]
    assert report["ratio_to_best_peer"] == pytest.approx(
        report["ratio_to_floor"] / best["ratio_to_floor"], abs=0.01
    )
    assert _peer_databases() == []


FAULTY_PEERS = {
    # Far more than a pipe holds, written before it dies: read from a file, not a pipe.
    "floods its errors and dies": (
        "head -c 300000 /dev/zero | tr '\\0' x >&2; echo 'the end of its errors' >&2; exit 3",
        "ended (exit status 3)",
    ),
    "answers with text": (
        "echo 'the end of its errors' >&2; echo hello",
        "answered 'hello\\n', not a line of JSON",
    ),
    "never answers": (
        "echo 'the end of its errors' >&2; exec sleep 600",
        "did not answer within 1 s",
    ),
}


@pytest.mark.parametrize("behaviour", FAULTY_PEERS)
def test_a_failing_peer_ends_the_bench_with_its_errors_and_leaves_nothing(
    behaviour, tmp_path, monkeypatch, redis_clean
):
    from agentops.dev.benchmarks import checkpoint

    monkeypatch.setattr(checkpoint, "ANSWER_SECONDS", 1)
    script, message = FAULTY_PEERS[behaviour]
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)

    with pytest.raises(CommandError, match=re.escape(f"peer langgraph {message}:")) as failure:
        call_command("bench", "checkpoint", "--steps", "2", "--repeat", "1", "--peers", str(python))

    # The end of what it wrote to its standard error (the last 3,000 characters).
    assert str(failure.value).endswith("the end of its errors\n")
    assert _peer_databases() == []
    assert not Task.objects.filter(agent="bench_noop").exists()


def test_bench_peers_without_their_virtualenv_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="make peers-venv"):
        call_command("bench", "checkpoint", "--peers", str(tmp_path / "python"))
    assert not Task.objects.exists()


def test_peers_go_with_the_checkpoint_benchmark_only():
    with pytest.raises(CommandError, match="checkpoint benchmark only"):
        call_command("bench", "pages", "--peers")


def test_bench_dispatch_runs_jobs_through_a_real_worker_and_cleans_up(redis_clean):
    out = StringIO()
    call_command(
        "bench",
        "checkpoint",
        "--steps",
        "1",
        "--repeat",
        "1",
        "--dispatch",
        "3",
        "--json",
        stdout=out,
    )
    report = json.loads(out.getvalue())

    for key in ("dispatch_ms_per_job", "worker_ms_per_job", "in_process_ms_per_job"):
        assert isinstance(report[key], float), key
    assert report["dispatch_jobs"] == 3
    assert not Task.objects.filter(agent="bench_noop").exists()


PAGES = ("inbox", "inbox_poll", "audit_queue", "task_page", "gate_panel", "task_list")


def test_bench_pages_seeds_a_scratch_database_and_reports_every_page(redis_clean):
    out = StringIO()
    call_command("bench", "pages", "--tasks", "300", "--repeat", "2", "--json", stdout=out)
    report = json.loads(out.getvalue())

    seeded = report["seeded"]
    assert seeded["tasks"] == 300
    # The mix, in parts per 10,000 with at least one task of each status: exact counts.
    assert seeded["tasks_by_status"] == {
        "aborted": 6,
        "awaiting_approval": 1,
        "needs_attention": 1,
        "paused": 1,
        "queued": 3,
        "retry_scheduled": 2,
        "rolled_back": 3,
        "running": 6,
        "succeeded": 277,
    }
    assert seeded["open_gates"] == 1
    assert seeded["steps"] > 300 * 5
    assert seeded["events"] > seeded["tasks"] * 10
    assert seeded["audit_items"] > seeded["audit_pending"] > 0
    assert list(report["pages"]) == list(PAGES)
    for name, page in report["pages"].items():
        assert page["status"] == 200, name
        assert page["queries"] > 0 and page["queries_constant"], name
        assert page["bytes"] > 1000, name
        # Time inside the WSGI handler: part of each request's own time, never more.
        assert 0 < page["server_p50_ms"] <= page["p50_ms"], name
        assert 0 < page["server_p95_ms"] <= page["p95_ms"], name
    # Each polled page's poll that finds nothing new: an empty 204, under a kilobyte on the wire.
    assert list(report["unchanged_polls"]) == ["inbox", "task_list", "task_page"]
    for name, poll in report["unchanged_polls"].items():
        assert poll["status"] == 204, name
        assert 0 < poll["bytes"] <= 1024 and poll["queries_constant"], name
        assert 0 < poll["queries"] <= 12, name
        assert 0 < poll["server_p50_ms"] <= poll["p50_ms"], name
    # The scratch database is gone and nothing was written to this one.
    assert not Task.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [report["database"]])
        assert cursor.fetchone() == (0,)


def test_bench_memory_runs_a_real_worker_and_reports_its_resident_set(redis_clean):
    out = StringIO()
    call_command("bench", "memory", "--steps", "22", "--payload-kb", "1", "--json", stdout=out)
    report = json.loads(out.getvalue())

    assert report["benchmark"] == "memory"
    assert (report["steps"], report["tasks"], report["payload_kb"]) == (22, 2, 1)
    # 22 steps: two tasks by default (at most 20 steps each). The first reading once one of them
    # (11 steps) is done, the last once both are (a quick worker may have finished the second too
    # by the time the first reading is taken).
    assert report["warm_up_tasks"] == 1
    assert 11 <= report["warm_up_steps"] <= 22
    assert report["warm_up_steps"] + report["measured_steps"] == 22
    # A Django worker with its imports is tens of MB; these are read from /proc, not made up.
    assert 30 < report["rss_first_mb"] < 2000
    assert 30 < report["rss_last_mb"] < 2000
    assert report["rss_max_mb"] >= max(report["rss_first_mb"], report["rss_last_mb"])
    assert report["rss_growth_ratio"] == pytest.approx(
        report["rss_last_mb"] / report["rss_first_mb"], abs=0.002
    )
    # Per step only over the measured steps (none when the worker had finished them all).
    growth = report["growth_kb_per_step"]
    assert isinstance(growth, float) if report["measured_steps"] else growth is None
    # The worker stopped (and unregistered), and the tasks are gone.
    assert Worker.count(queue=queues.queue()) == 0
    assert not Task.objects.filter(agent="bench_noop").exists()


def test_bench_memory_refuses_steps_it_cannot_split():
    with pytest.raises(CommandError, match="cannot be split into 5 tasks"):
        call_command("bench", "memory", "--steps", "4", "--tasks", "5")
    with pytest.raises(CommandError, match="more than 200 steps per task"):
        call_command("bench", "memory", "--steps", "401", "--tasks", "2")
    assert not Task.objects.exists()


def test_bench_throughput_with_a_slow_model_reports_the_calls_in_flight_and_their_memory(
    redis_clean, capsys
):
    call_command(
        "bench", "throughput", "--workers", "1", "--tasks-per-worker", "4", "--tasks", "4",
        "--steps", "3", "--model-seconds", "1", "--json",
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)

    assert report["tasks_succeeded"] == 4 and report["tasks_per_worker"] == 4
    assert report["model_seconds"] == 1.0 and report["steps_per_second_allowed"] == 4.0
    # Sampled every half second over at least three seconds of calls: four tasks held at once.
    assert report["tasks_in_flight_max"] == 4
    assert 0 < report["share_of_allowed"] <= 1
    assert report["workers_pss_mb"] > 0
    assert report["pss_mb_per_task_in_flight"] == pytest.approx(
        report["workers_pss_mb"] / report["tasks_in_flight_median"], abs=0.05
    )
    assert Task.objects.count() == 0  # the bench's tasks are gone


def test_bench_redaction_times_each_kind_of_value_and_the_revision_it_is_compared_with():
    out = StringIO()
    call_command(
        "bench", "redaction", "--payload-kb", "8", "--repeat", "2", "--against", "HEAD", "--json",
        stdout=out,
    )  # fmt: skip
    report = json.loads(out.getvalue())

    assert report["size_kb"] == 8 and report["repeat"] == 2 and report["against"] == "HEAD"
    assert len(report["kinds"]) == 7
    for figures in report["kinds"].values():
        # None of the values holds a secret: both redactors leave each as it is.
        assert figures["unchanged"] is True and figures["before_unchanged"] is True
        assert figures["after_ms"] >= 0 and figures["before_ms"] >= 0


def test_bench_redaction_refuses_a_size_or_repeat_below_one():
    with pytest.raises(CommandError, match="must be positive"):
        call_command("bench", "redaction", "--repeat", "0")
