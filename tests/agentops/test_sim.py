from __future__ import annotations

import time
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command

from agentops.dev.sim.models import Effect, Fault, FaultMode
from agentops.dev.sim.services import FaultInvalid, fault_reset, fault_set
from agentops.dev.sim.views import body_digest
from agentops.dev.sim.world import order
from tests.conftest import wait_for

# Over HTTP the services see only committed rows; the other tests roll back, which is faster.
live = pytest.mark.django_db(transaction=True)
db = pytest.mark.django_db

REFUND = {"order_id": "A1001", "amount": 10.0}
LOOKUP = {"order_id": "A1001"}
BODIES = {"payments.refund": REFUND, "orders.lookup": LOOKUP}
DELAY = 0.4
SHORT_TIMEOUT = 0.15


def post(
    base: str, endpoint: str, body: dict, *, key: str | None = None, timeout: float = 5.0
) -> httpx.Response:
    service, operation = endpoint.split(".")
    headers = {"Idempotency-Key": key} if key else {}
    return httpx.post(f"{base}/{service}/{operation}", json=body, headers=headers, timeout=timeout)


def probe(base: str, endpoint: str, key: str) -> httpx.Response:
    service, operation = endpoint.split(".")
    return httpx.get(f"{base}/{service}/{operation}/effects/{key}", timeout=5.0)


def effects(endpoint: str, **filters: object) -> int:
    service, operation = endpoint.split(".")
    return Effect.objects.filter(service=service, operation=operation, **filters).count()


def set_fault(endpoint: str, mode: str, **kwargs: object) -> Fault:
    service, operation = endpoint.split(".")
    return fault_set(service=service, operation=operation, mode=mode, **kwargs)


# (mode, HTTP status or None for a client-side timeout, whether a write performs its effect)
FAULT_MATRIX = [
    (FaultMode.OK, 200, True),
    (FaultMode.RATE_LIMITED, 429, False),
    (FaultMode.ERROR_BEFORE, 503, False),
    (FaultMode.FORBIDDEN, 403, False),
    (FaultMode.EXECUTE_THEN_5XX, 502, True),
    (FaultMode.SCHEMA_CHANGE, 200, True),
    (FaultMode.SLOW, 200, True),
    (FaultMode.TIMEOUT_BEFORE, None, False),
    (FaultMode.EXECUTE_THEN_TIMEOUT, None, True),
    # Without an earlier effect there is no other response to mix up: an ordinary answer.
    (FaultMode.OUT_OF_ORDER, 200, True),
    # Delivered twice, performed once: the key deduplicates.
    (FaultMode.DUPLICATE, 200, True),
]


def test_fault_matrix_covers_every_mode():
    assert sorted(mode for mode, _, _ in FAULT_MATRIX) == sorted(FaultMode.values)


@live
@pytest.mark.parametrize(
    ("mode", "status", "executes"), FAULT_MATRIX, ids=[str(m) for m, _, _ in FAULT_MATRIX]
)
def test_fault_mode_answers_and_records_effects(sim_server, mode, status, executes):
    set_fault("payments.refund", mode, delay=DELAY)
    set_fault("orders.lookup", mode, delay=DELAY)
    started = time.monotonic()

    if status is None:
        for endpoint, body in BODIES.items():
            with pytest.raises(httpx.TimeoutException):
                post(sim_server, endpoint, body, key="k-1", timeout=SHORT_TIMEOUT)
        if executes:
            wait_for(lambda: effects("payments.refund") == 1, timeout=3, message="the effect")
        time.sleep(max(0.0, DELAY + 0.2 - (time.monotonic() - started)))
        assert effects("payments.refund") == (1 if executes else 0)
        assert Effect.objects.count() == effects("payments.refund")
        return

    write = post(sim_server, "payments.refund", REFUND, key="k-1")
    write_elapsed = time.monotonic() - started
    read = post(sim_server, "orders.lookup", LOOKUP, key="k-1")
    read_elapsed = time.monotonic() - started - write_elapsed

    assert (write.status_code, read.status_code) == (status, status)
    assert effects("payments.refund") == (1 if executes else 0)
    assert Effect.objects.count() == effects("payments.refund")
    if mode == FaultMode.RATE_LIMITED:
        assert write.headers["Retry-After"] == read.headers["Retry-After"] == "1"
    if mode == FaultMode.SLOW:
        assert min(write_elapsed, read_elapsed) >= DELAY
    if mode == FaultMode.SCHEMA_CHANGE:
        for response, original in ((write, Effect.objects.get().response), (read, order("A1001"))):
            assert response.json() == {"data": {"v2": original}, "api_version": "2"}
    elif status == 200:
        assert write.json()["refund_id"].startswith("rf_")
        assert read.json() == order("A1001")


@live
def test_retry_after_announces_the_configured_delay(sim_server):
    call_command("sim_fault", "payments.refund", "429", "--delay", "3", stdout=StringIO())

    response = post(sim_server, "payments.refund", REFUND, key="k-429")

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "3"
    assert effects("payments.refund") == 0


@live
def test_fail_the_next_n_calls_then_ok(sim_server):
    set_fault("payments.refund", FaultMode.ERROR_BEFORE, count=2)

    statuses = [
        post(sim_server, "payments.refund", REFUND, key="k-n").status_code for _ in range(3)
    ]

    assert statuses == [503, 503, 200]
    assert effects("payments.refund", idempotency_key="k-n") == 1
    assert Fault.objects.get(service="payments", operation="refund").remaining == 0


@live
def test_a_fault_applies_to_its_endpoint_only(sim_server):
    set_fault("payments.refund", FaultMode.FORBIDDEN)

    refused = post(sim_server, "payments.refund", REFUND, key="k-a")
    legacy = post(sim_server, "payments.refund_legacy", REFUND, key="k-b")

    assert (refused.status_code, legacy.status_code) == (403, 200)
    assert effects("payments.refund") == 0
    assert effects("payments.refund_legacy") == 1


@live
def test_reset_restores_normal_answers(sim_server):
    set_fault("payments.refund", FaultMode.ERROR_BEFORE)
    assert post(sim_server, "payments.refund", REFUND, key="k-r").status_code == 503

    assert fault_reset(service="payments", operation="refund") == 1

    assert post(sim_server, "payments.refund", REFUND, key="k-r").status_code == 200
    assert effects("payments.refund") == 1


# -- idempotency and probes --------------------------------------------------------------------


@live
def test_same_key_replays_the_stored_response_without_a_new_effect(sim_server):
    first = post(sim_server, "payments.refund", REFUND, key="k-same")
    second = post(sim_server, "payments.refund", REFUND, key="k-same")

    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert effects("payments.refund", idempotency_key="k-same") == 1
    assert effects("payments.refund") == 1


@live
def test_retry_after_execute_then_5xx_replays_instead_of_refunding_twice(sim_server):
    set_fault("payments.refund", FaultMode.EXECUTE_THEN_5XX, count=1)

    failed = post(sim_server, "payments.refund", REFUND, key="k-5xx")
    retried = post(sim_server, "payments.refund", REFUND, key="k-5xx")

    assert failed.status_code == 502
    assert retried.status_code == 200
    assert retried.json() == Effect.objects.get().response
    assert effects("payments.refund") == 1


@live
def test_same_key_with_another_body_is_a_conflict(sim_server):
    assert post(sim_server, "payments.refund", REFUND, key="k-409").status_code == 200

    response = post(sim_server, "payments.refund", {**REFUND, "amount": 11.0}, key="k-409")

    assert response.status_code == 409
    assert "Idempotency-Key" in response.json()["error"]
    assert effects("payments.refund") == 1


@live
def test_same_body_in_another_key_order_is_the_same_request(sim_server):
    post(sim_server, "payments.refund", {"order_id": "A1001", "amount": 10}, key="k-order")

    response = post(
        sim_server, "payments.refund", {"amount": 10.0, "order_id": "A1001"}, key="k-order"
    )

    assert response.status_code == 200
    assert effects("payments.refund") == 1


def test_the_sims_own_digest_ignores_key_order_number_spelling_and_unicode_form():
    composed, decomposed = "Caf\u00e9", "Cafe\u0301"
    digest = body_digest({"order_id": "A1001", "amount": 10, "note": composed})

    assert body_digest({"note": decomposed, "amount": 10.0, "order_id": "A1001"}) == digest
    assert body_digest({"order_id": "A1001", "amount": 10.5, "note": composed}) != digest
    assert body_digest({"order_id": "A1001", "amount": "10", "note": composed}) != digest
    assert len(digest) == 64 and int(digest, 16) >= 0


@live
def test_calls_without_a_key_each_perform_the_effect(sim_server):
    post(sim_server, "payments.refund", REFUND)
    post(sim_server, "payments.refund", REFUND)

    assert effects("payments.refund", idempotency_key=None) == 2


@live
def test_probe_finds_the_effect_of_a_key(sim_server):
    done = post(sim_server, "payments.refund", REFUND, key="k-probe")

    found = probe(sim_server, "payments.refund", "k-probe")
    missing = probe(sim_server, "payments.refund", "k-never-sent")

    assert found.status_code == 200
    assert found.json() == {"found": True, "response": done.json()}
    assert missing.status_code == 404
    assert missing.json() == {"found": False}


@live
def test_probe_finds_an_effect_whose_answer_timed_out(sim_server):
    set_fault("payments.refund", FaultMode.EXECUTE_THEN_TIMEOUT, delay=DELAY)

    with pytest.raises(httpx.TimeoutException):
        post(sim_server, "payments.refund", REFUND, key="k-lost", timeout=SHORT_TIMEOUT)
    found = wait_for(
        lambda: probe(sim_server, "payments.refund", "k-lost").status_code == 200,
        timeout=3,
        message="the probe to find the effect",
    )

    assert found
    assert effects("payments.refund", idempotency_key="k-lost") == 1


@live
def test_legacy_refund_has_no_probe_and_ignores_keys(sim_server):
    first = post(sim_server, "payments.refund_legacy", REFUND, key="k-legacy")
    second = post(sim_server, "payments.refund_legacy", REFUND, key="k-legacy")
    answer = probe(sim_server, "payments.refund_legacy", "k-legacy")

    assert first.status_code == second.status_code == 200
    assert effects("payments.refund_legacy") == 2
    assert effects("payments.refund_legacy", idempotency_key=None) == 2
    assert answer.status_code == 404
    assert "no probe" in answer.json()["error"]


# -- services, command and admin ---------------------------------------------------------------


@db
def test_fault_set_rejects_unknown_endpoints_and_modes_listing_choices():
    with pytest.raises(FaultInvalid, match=r"payments\.refund_legacy"):
        fault_set(service="payments", operation="refnd", mode="429")
    with pytest.raises(FaultInvalid, match=r"valid modes: ok, 429, 5xx_before"):
        fault_set(service="payments", operation="refund", mode="500")
    with pytest.raises(FaultInvalid, match="at least 1"):
        fault_set(service="payments", operation="refund", mode="429", count=0)
    with pytest.raises(FaultInvalid, match="zero or more"):
        fault_set(service="payments", operation="refund", mode="slow", delay=-1)
    with pytest.raises(FaultInvalid, match="at most 120, not 121"):
        fault_set(service="payments", operation="refund", mode="timeout_before", delay=121)
    assert Fault.objects.count() == 0


@db
def test_fault_set_updates_the_endpoint_row_in_place():
    set_fault("payments.refund", FaultMode.RATE_LIMITED, count=3, delay=2)
    set_fault("payments.refund", FaultMode.SLOW, delay=0.5)

    fault = Fault.objects.get()
    assert (fault.mode, fault.remaining, fault.delay_seconds) == ("slow", None, 0.5)


@db
def test_command_sets_lists_and_resets_faults():
    out = StringIO()

    call_command("sim_fault", "payments.refund", "5xx_before", "--count", "2", stdout=out)
    call_command("sim_fault", "hotels.book", "execute_then_timeout", "--delay", "0.3", stdout=out)
    listing = StringIO()
    call_command("sim_fault", "--list", stdout=listing)
    lines = {line.split()[0]: line.split() for line in listing.getvalue().splitlines()}

    assert "payments.refund: 5xx_before for the next 2 call(s)" in out.getvalue()
    assert lines["endpoint"] == [
        "endpoint",
        "mode",
        "remaining",
        "delay",
        "writes",
        "keys",
        "probe",
    ]
    assert lines["payments.refund"] == [
        "payments.refund",
        "5xx_before",
        "2",
        "0",
        "yes",
        "yes",
        "yes",
    ]
    assert lines["hotels.book"][1:4] == ["execute_then_timeout", "every", "call"]
    assert lines["payments.refund_legacy"][-3:] == ["yes", "no", "no"]
    assert lines["orders.lookup"][1:] == ["ok", "-", "0", "no", "n/a", "n/a"]
    assert len(lines) == 1 + 17  # 14 endpoints + suppliers quote, order, cancel

    call_command("sim_fault", "--reset", "hotels.book", stdout=out)
    assert Fault.objects.get(service="hotels").mode == FaultMode.OK
    assert Fault.objects.get(service="payments").mode == "5xx_before"

    reset = StringIO()
    call_command("sim_fault", "--reset", stdout=reset)
    assert "reset 1 endpoint(s)" in reset.getvalue()
    assert set(Fault.objects.values_list("mode", flat=True)) == {"ok"}


@db
def test_command_lists_a_spent_fault_as_ok():
    Fault.objects.create(service="payments", operation="refund", mode="429", remaining=0)
    listing = StringIO()

    call_command("sim_fault", "--list", stdout=listing)

    row = next(
        line for line in listing.getvalue().splitlines() if line.startswith("payments.refund ")
    )
    assert row.split()[1:3] == ["ok", "spent"]


@db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["payments.nope", "429"],
            r"unknown endpoint 'payments.nope'; valid endpoints: .*"
            r"payments\.refund",
        ),
        (["payments", "429"], r"valid endpoints: eligibility\.check"),
        (
            ["payments.refund", "500"],
            r"unknown mode '500'; valid modes: ok, 429, 5xx_before, "
            r"timeout_before",
        ),
        (["payments.refund"], r"give SERVICE\.OPERATION and MODE"),
        (["--list", "payments.refund"], "--list takes no other arguments"),
        (["--reset", "payments.refund", "429"], "--reset takes at most an endpoint"),
        (["--reset", "payments.nope"], "unknown endpoint"),
        (["payments.refund", "429", "--count", "0"], "at least 1"),
    ],
)
def test_command_errors_name_the_valid_choices(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("sim_fault", *args, stdout=StringIO())
    assert Fault.objects.count() == 0


@db
def test_admin_add_form_accepts_only_existing_endpoints(admin_client):
    bad = admin_client.post(
        "/admin/sim/fault/add/",
        {
            "service": "payments",
            "operation": "book",
            "mode": "429",
            "remaining": "",
            "delay_seconds": "0",
        },
    )
    good = admin_client.post(
        "/admin/sim/fault/add/",
        {
            "service": "payments",
            "operation": "refund",
            "mode": "429",
            "remaining": "2",
            "delay_seconds": "1.5",
        },
    )

    assert bad.status_code == 200
    assert "payments has no operation" in bad.content.decode()
    assert good.status_code == 302
    fault = Fault.objects.get()
    assert (fault.service, fault.operation, fault.mode, fault.remaining) == (
        "payments",
        "refund",
        "429",
        2,
    )


@db
def test_admin_rejects_a_zero_count(admin_client):
    response = admin_client.post(
        "/admin/sim/fault/add/",
        {
            "service": "payments",
            "operation": "refund",
            "mode": "429",
            "remaining": "0",
            "delay_seconds": "0",
        },
    )

    assert response.status_code == 200
    assert "Give at least 1" in response.content.decode()
    assert Fault.objects.count() == 0


@db
def test_admin_rejects_a_delay_past_the_longest_a_fault_may_hold_a_request(admin_client):
    response = admin_client.post(
        "/admin/sim/fault/add/",
        {
            "service": "payments",
            "operation": "refund",
            "mode": "timeout_before",
            "remaining": "",
            "delay_seconds": "86400",
        },
    )

    assert response.status_code == 200
    assert "at most 120, not 86400" in response.content.decode()
    assert Fault.objects.count() == 0


@db
def test_admin_action_resets_selected_faults_to_ok(admin_client):
    refund = set_fault("payments.refund", FaultMode.FORBIDDEN)
    hotel = set_fault("hotels.book", FaultMode.SLOW, delay=1)
    charge = set_fault("payments.charge", FaultMode.ERROR_BEFORE, count=4)

    response = admin_client.post(
        "/admin/sim/fault/",
        {
            "action": "reset_to_ok",
            "_selected_action": [refund.pk, hotel.pk],
        },
    )

    assert response.status_code == 302
    modes = dict(Fault.objects.values_list("operation", "mode"))
    assert modes == {"refund": "ok", "book": "ok", "charge": "5xx_before"}
    charge.refresh_from_db()
    assert charge.remaining == 4


@live
def test_out_of_order_answers_with_another_requests_response_and_key(sim_server):
    first = post(sim_server, "payments.refund", REFUND, key="k-first")
    set_fault("payments.refund", FaultMode.OUT_OF_ORDER, count=1)

    mixed = post(sim_server, "payments.refund", {**REFUND, "amount": 5}, key="k-second")
    found = probe(sim_server, "payments.refund", "k-second")

    assert mixed.status_code == 200
    assert mixed.headers["Idempotency-Key"] == "k-first"
    assert mixed.json() == first.json()
    assert effects("payments.refund") == 2  # ours ran all the same: the probe finds it
    assert found.json()["response"]["amount"] == 5


@live
def test_a_duplicated_delivery_runs_twice_only_where_keys_are_ignored(sim_server):
    set_fault("payments.refund", FaultMode.DUPLICATE, count=1)
    set_fault("payments.refund_legacy", FaultMode.DUPLICATE, count=1)

    keyed = post(sim_server, "payments.refund", REFUND, key="k-dup")
    legacy = post(sim_server, "payments.refund_legacy", REFUND, key="k-dup-legacy")

    assert keyed.status_code == legacy.status_code == 200
    assert keyed.headers["Idempotency-Key"] == "k-dup"
    assert effects("payments.refund") == 1
    assert effects("payments.refund_legacy") == 2
