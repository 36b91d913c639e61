"""The engine's gates: status moves only along GATE_TRANSITIONS, once; the sweeper tells the
registered gate hooks what a timeout did; other apps add sections to the task page through the
registry, not through an import.

Gates are opened by the real runner against the simulated services (no mocks).
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from agentops import task_page
from agentops.engine import gates
from agentops.engine.decisions import gates_expire_overdue
from agentops.engine.gates import (
    gate_amount,
    gate_transition,
    gates_withdraw,
)
from agentops.models import Gate, Task
from agentops.states import GATE_TRANSITIONS, GateStatus, TaskStatus
from policies.catalog import amount_of
from tests.reviews.builders import gated_refund, open_gate

pytestmark = pytest.mark.django_db


def test_every_gate_transition_leaves_open():
    assert {t.sources for t in GATE_TRANSITIONS.values()} == {frozenset({GateStatus.OPEN})}
    assert {name: t.target for name, t in GATE_TRANSITIONS.items()} == {
        "approve": GateStatus.APPROVED,
        "reject": GateStatus.REJECTED,
        "expire": GateStatus.EXPIRED,
        "withdraw": GateStatus.EXPIRED,
    }


def test_a_gate_is_decided_once(sim, redis_clean):
    gate = open_gate(gated_refund())

    assert gate_transition(gate_id=gate.pk, name="approve", feedback="fine") is True
    assert gate_transition(gate_id=gate.pk, name="reject", feedback="no") is False
    assert gates_withdraw(task_id=gate.task_id, because="abort") == 0

    gate.refresh_from_db()
    assert (gate.status, gate.feedback) == (GateStatus.APPROVED, "fine")
    assert gate.decided_at is not None


def test_a_gate_transition_sets_the_status_itself(sim, redis_clean):
    gate = open_gate(gated_refund())

    with pytest.raises(ValueError, match="sets the status"):
        gate_transition(gate_id=gate.pk, name="reject", status=GateStatus.APPROVED)

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_the_sweeper_tells_the_gate_hooks_what_a_timeout_did(sim, redis_clean, monkeypatch):
    task = gated_refund()
    told: list[tuple[int, str]] = []

    def hook(gate: Gate, *, what: str, reason: str, detail: dict[str, Any]) -> None:
        told.append((gate.pk, what))

    monkeypatch.setattr(gates, "GATE_HOOKS", [hook])
    gate = open_gate(task)

    assert gates_expire_overdue(now=timezone.now() + timedelta(days=1)) == 1
    assert gates_expire_overdue(now=timezone.now() + timedelta(days=1)) == 0

    assert told == [(gate.pk, "expired")]
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.EXPIRED
    # Rejected for the agent to re-plan: the task is back in the queue.
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED


def test_the_task_page_shows_the_registered_sections_escaping_plain_text(
    sim, redis_clean, admin_client, monkeypatch
):
    task = gated_refund()

    def section(request: Any, task: Task) -> str:
        return f"<b>section of task {task.pk}</b>"

    monkeypatch.setattr(task_page, "SECTIONS", [section])
    body = admin_client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()

    assert f"&lt;b&gt;section of task {task.pk}&lt;/b&gt;" in body
    assert 'id="review-heading"' not in body


def test_the_task_page_shows_the_review_section_registered_by_reviews(
    sim, redis_clean, admin_client
):
    task = gated_refund()

    body = admin_client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()

    assert 'id="review-heading"' in body
    assert reverse("reviews:gate", args=[open_gate(task).pk]) in body


@pytest.mark.parametrize(
    ("argument", "routed", "stored"),
    [
        (472, 472.0, Decimal("472.00")),
        (999_999_999_999.99, 999_999_999_999.99, Decimal("999999999999.99")),
        (10**12, 1e12, None),
        (1e308, 1e308, None),
        (10**400, math.inf, None),
        (-(10**400), -math.inf, None),
        ("472", None, None),
    ],
)
def test_any_amount_routes_and_a_gate_stores_what_its_column_holds(argument, routed, stored):
    assert amount_of({"amount": argument}) == routed
    assert gate_amount(amount_of({"amount": argument})) == stored
