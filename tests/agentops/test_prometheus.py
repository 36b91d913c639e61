"""The Prometheus endpoint: bearer-token protection, the engine's counters summed across real
worker processes (multiprocess mode), and the gauges computed from the database at scrape time."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from agentops.engine import task_create
from agentops.engine.dispatch import enqueue_now
from agentops.metrics import task_tokens_saved_by_resume
from agentops.models import Event, Task
from agentops.plumbing import prometheus
from agentops.states import TaskStatus
from tests.conftest import wait_for
from tests.reviews.history import T0, make_audit_item, make_gate, make_task

TOKEN = "s3cret-metrics-token"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: Client | None = None) -> Samples:
    response = (client or Client()).get(
        reverse("agentops:metrics"), HTTP_AUTHORIZATION=f"Bearer {TOKEN}"
    )
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def token(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_TOKEN": TOKEN}
    return TOKEN


# -- access --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_without_a_configured_token_the_endpoint_does_not_exist(settings, admin_user):
    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_TOKEN": ""}
    client = Client()
    client.force_login(admin_user)

    assert client.get(reverse("agentops:metrics")).status_code == 404
    assert client.get(reverse("agentops:metrics"), HTTP_AUTHORIZATION="Bearer ").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN])
def test_a_request_without_the_token_is_refused(token, header, admin_user):
    client = Client()
    # A session, even a superuser's, is not the token.
    client.force_login(admin_user)
    headers = {"HTTP_AUTHORIZATION": header} if header else {}

    response = client.get(reverse("agentops:metrics"), **headers)

    assert response.status_code == 403
    assert b"agentops_" not in response.content


@pytest.mark.django_db
def test_the_token_opens_the_exposition(token):
    samples = scrape()

    assert ("agentops_queue_depth", frozenset({("queue", "default")})) in samples


# -- counters follow committed events ------------------------------------------------------------


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.django_db(transaction=True)
def test_engine_counters_count_committed_events_only():
    before = counted("agentops_steps_failed_total", layer="tool", kind="timeout")
    failed = ("agentops.step.failed", {"failure": {"layer": "tool", "kind": "timeout"}})

    with pytest.raises(RuntimeError), transaction.atomic():
        prometheus.events_written([failed])
        raise RuntimeError("rolled back")
    assert counted("agentops_steps_failed_total", layer="tool", kind="timeout") == before

    with transaction.atomic():
        prometheus.events_written([failed, ("agentops.step.completed", {})])
    assert counted("agentops_steps_failed_total", layer="tool", kind="timeout") == before + 1


# -- gauges from the database --------------------------------------------------------------------


@pytest.fixture
def clock(monkeypatch):
    from django.utils import timezone

    from tests.reviews.history import Clock

    fixed = Clock(T0)
    monkeypatch.setattr(timezone, "now", fixed)
    return fixed


@pytest.mark.django_db
def test_gauges_count_tasks_gates_and_audit_items(token, clock):
    for _ in range(3):
        make_task(clock, tokens_used=100)
    waiting = make_task(clock, status=TaskStatus.AWAITING_APPROVAL, tokens_used=7)
    make_task(
        clock, agent="trip", status=TaskStatus.NEEDS_ATTENTION, failure_kind="authorization_gap"
    )
    make_gate(clock, waiting, opened=T0)
    make_gate(clock, waiting, opened=T0, status="approved", decided=T0 + timedelta(seconds=45))
    make_gate(clock, waiting, opened=T0, status="rejected", decided=T0 + timedelta(seconds=700))
    make_audit_item(clock, waiting)
    make_audit_item(clock, waiting, rule="notification")
    make_audit_item(clock, waiting, status="ok")

    samples = scrape()

    assert value(samples, "agentops_tasks", status="succeeded", agent="refund") == 3
    assert value(samples, "agentops_tasks", status="awaiting_approval", agent="refund") == 1
    assert value(samples, "agentops_tasks", status="needs_attention", agent="trip") == 1
    assert value(samples, "agentops_tokens_spent", agent="refund") == 307
    assert value(samples, "agentops_gates_open", rule="large payment") == 1
    assert value(samples, "agentops_audit_items_open", rule="small payment") == 1
    assert value(samples, "agentops_audit_items_open", rule="notification") == 1
    assert value(samples, "agentops_gate_wait_seconds_count") == 2
    assert value(samples, "agentops_gate_wait_seconds_sum") == 745
    assert value(samples, "agentops_gate_wait_seconds_bucket", le="60.0") == 1
    assert value(samples, "agentops_gate_wait_seconds_bucket", le="900.0") == 2


@pytest.mark.django_db
def test_tokens_saved_by_resume_gauge(token, clock):
    make_task(clock, tokens_saved=30)
    make_task(clock, tokens_saved=12)
    make_task(clock, agent="trip", tokens_saved=5)

    samples = scrape()

    assert value(samples, "agentops_tokens_saved_by_resume", agent="refund") == 42
    assert value(samples, "agentops_tokens_saved_by_resume", agent="trip") == 5


@pytest.mark.django_db
def test_queue_depth_and_oldest_job_age(token, redis_clean, clock):
    clock.at(T0)
    task = make_task(clock)
    enqueue_now(task.pk, token=1)
    enqueue_now(task.pk, token=2)

    samples = scrape()

    assert value(samples, "agentops_queue_depth", queue="default") == 2
    assert value(samples, "agentops_queue_depth", queue="notices") == 0  # a queue of its own
    assert value(samples, "agentops_queue_oldest_job_age_seconds", queue="default") >= 0


# -- counters across processes -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.crash
def test_counters_from_worker_processes_add_up(processes, token, tmp_path, monkeypatch):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    processes.env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    task = task_create(agent="refund", goal="Refund order A1001", input={"order_id": "A1001"})
    other = task_create(agent="refund", goal="Refund A1001 again", input={"order_id": "A1001"})

    # The first worker is killed right after step 4's model result; a second one takes over.
    victim = processes.worker(crash_at="after_model_result@3")
    assert victim.wait(timeout=60) == -9
    processes.worker()
    processes.sweeper()
    done: Callable[[], bool] = lambda: all(  # noqa: E731
        t.is_terminal for t in Task.objects.filter(pk__in=[task.pk, other.pk])
    )
    wait_for(done, timeout=90, message="both tasks to finish")

    samples = scrape()

    def events(action: str) -> int:
        return Event.objects.filter(action=action).count()

    tasks = list(Task.objects.filter(pk__in=[task.pk, other.pk]))
    assert value(samples, "agentops_steps_started_total") == events("agentops.step.started")
    assert value(samples, "agentops_steps_completed_total") == events("agentops.step.completed")
    assert value(samples, "agentops_lease_takeovers_total") == 1
    assert value(samples, "agentops_sweeper_redrives_total") >= 1
    assert value(samples, "agentops_model_tokens_total") == sum(t.tokens_used for t in tasks)
    model_calls = events("agentops.step.model_result")
    assert value(samples, "agentops_step_duration_seconds_count", part="model") == model_calls
    assert value(samples, "agentops_step_duration_seconds_count", part="checkpoint") > 0
    assert value(samples, "agentops_step_duration_seconds_count", part="tool") >= 10
    saved = task_tokens_saved_by_resume([task.pk])[task.pk]
    assert saved > 0
    assert value(samples, "agentops_tokens_saved_by_resume", agent="refund") == sum(
        t.tokens_saved for t in tasks
    )


def failures_by_label() -> dict[tuple[str, str], float]:
    return {
        (sample.labels["layer"], sample.labels["kind"]): sample.value
        for family in REGISTRY.collect()
        if family.name == "agentops_steps_failed"
        for sample in family.samples
        if sample.name == "agentops_steps_failed_total"
    }


# Rolled back, against the simulated services in this process: the engine's counters move when
# its own transactions end (tests/rollback.py), as the test above proves they do on a real commit.
@pytest.mark.django_db
def test_an_unknown_outcome_and_its_step_failure_are_counted(sim, redis_clean, settings):
    from tests.reviews.builders import unknown_refund

    unknown_before = counted("agentops_executed_unknown_calls_total")
    failed_before = failures_by_label()
    completed_before = counted("agentops_steps_completed_total")
    model_before = counted("agentops_step_duration_seconds_count", part="model")

    task = unknown_refund(settings)

    failure = Event.objects.get(task=task, action="agentops.step.failed").payload["failure"]
    layer, kind = failure["layer"], failure["kind"]
    assert counted("agentops_executed_unknown_calls_total") == unknown_before + 1
    after = failures_by_label()
    assert {
        k: n - failed_before.get(k, 0) for k, n in after.items() if n != failed_before.get(k)
    } == {(layer, kind): 1}
    completed = Event.objects.filter(task=task, action="agentops.step.completed").count()
    assert counted("agentops_steps_completed_total") == completed_before + completed
    model_calls = Event.objects.filter(task=task, action="agentops.step.model_result").count()
    assert counted("agentops_step_duration_seconds_count", part="model") == (
        model_before + model_calls
    )


# -- Prometheus' own tools: the exposition, the shipped alert rules and dashboard ------------------

MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring"


def promtool(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Prometheus' own checker (Debian's `prometheus` package; .ci/run installs it)."""
    executable = shutil.which("promtool")
    if executable is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (see the README)")
    return subprocess.run([executable, *args], input=stdin, capture_output=True, timeout=60)


def exposition(client: Client | None = None) -> bytes:
    response = (client or Client()).get(
        reverse("agentops:metrics"), HTTP_AUTHORIZATION=f"Bearer {TOKEN}"
    )
    assert response.status_code == 200
    return response.content


@pytest.mark.django_db
def test_the_exposition_passes_promtool_even_with_django_rqs_summary_loaded(token, clock):
    import django_rq.urls  # noqa: F401  (creates django-rq's own Summary, which promtool refuses)

    waiting = make_task(clock, status=TaskStatus.AWAITING_APPROVAL)
    make_gate(clock, waiting, opened=T0)
    prometheus.STEPS_FAILED.labels(layer="tool", kind="timeout").inc(0)
    text = exposition()

    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert b"rq_request_processing_seconds" not in text


def names_used(text: str) -> set[str]:
    return set(re.findall(r"\bagentops_[a-z_]+", text))


@pytest.mark.django_db
def test_the_shipped_alert_rules_and_dashboard_use_only_served_metrics(token, clock):
    checked = promtool("check", "rules", str(MONITORING / "alerts.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert b"SUCCESS: 7 rules found" in checked.stdout

    waiting = make_task(clock, status=TaskStatus.AWAITING_APPROVAL, tokens_saved=5)
    make_gate(clock, waiting, opened=T0)
    make_audit_item(clock, waiting)
    prometheus.STEPS_FAILED.labels(layer="tool", kind="timeout").inc(0)
    with prometheus.timed("checkpoint"):  # a histogram child with samples
        pass
    served = {
        sample.name
        for family in text_string_to_metric_families(exposition().decode())
        for sample in family.samples
    }
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = names_used((MONITORING / "alerts.yml").read_text()) | names_used("\n".join(expressions))
    assert len(used) >= 10
    assert used <= served, f"not served: {sorted(used - served)}"
