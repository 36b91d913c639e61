"""The two test-only mechanisms that let a test that starts no process roll back instead of
truncating: commits as the code sees them (tests/rollback.py) and the simulated services in the
test's process (tests/simulated.py)."""

from __future__ import annotations

import time

import httpx
import pytest
from django.db import transaction

from agentops.dev.sim.models import Effect, FaultMode
from agentops.dev.sim.services import fault_set
from agentops.engine.outbound import in_transaction
from tests.simulated import BASE_URL, sim_client

pytestmark = pytest.mark.django_db
REFUND = {"order_id": "A1001", "amount": 10.0}


def test_a_callback_runs_when_the_codes_block_commits_and_never_when_it_rolls_back():
    ran: list[str] = []
    transaction.on_commit(lambda: ran.append("outside any block"))
    with transaction.atomic():
        transaction.on_commit(lambda: ran.append("committed"))
        with transaction.atomic():
            transaction.on_commit(lambda: ran.append("inner"))
        assert ran == ["outside any block"]  # the outer block is still open
    with pytest.raises(RuntimeError), transaction.atomic():
        transaction.on_commit(lambda: ran.append("rolled back"))
        raise RuntimeError

    assert ran == ["outside any block", "committed", "inner"]
    assert in_transaction() is False  # the test's own blocks are not the code's


def test_the_in_process_services_perform_a_keyed_write_once():
    with sim_client(timeout=5.0) as client:
        answers = [
            client.post(
                f"{BASE_URL}/payments/refund", json=REFUND, headers={"Idempotency-Key": "k-1"}
            )
            for _ in range(2)
        ]
        missing = client.post(f"{BASE_URL}/payments/nothing", json={})

    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json()
    assert answers[0].headers["Idempotency-Key"] == "k-1"
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
    assert missing.status_code == 404 and "no endpoint" in missing.json()["error"]


def test_a_fault_slower_than_the_clients_timeout_times_out_after_its_effect():
    fault_set(
        service="payments", operation="refund", mode=FaultMode.EXECUTE_THEN_TIMEOUT, delay=30.0
    )
    started = time.monotonic()

    with sim_client(timeout=0.2) as client, pytest.raises(httpx.ReadTimeout):
        client.post(f"{BASE_URL}/payments/refund", json=REFUND, headers={"Idempotency-Key": "k"})

    assert time.monotonic() - started < 5  # the client's 0.2 s, not the fault's 30 s
    assert Effect.objects.filter(service="payments", operation="refund").count() == 1
