"""Guessing is throttled: failed sign-ins per username and per address, through the real login
form and the real Redis, with short limits instead of long sleeps.

Bad API tokens are tested with the API in tests/reviews/test_api.py.
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Any

import pytest
from django.contrib.auth import SESSION_KEY
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agentops.plumbing.logs import StructuredFormatter
from agentops.plumbing.throttle import Scope, address_bucket

PASSWORD = "correct horse battery staple"
WRONG = "Tr0ub4dor&3-wrong"


@pytest.fixture
def limits(settings: Any) -> dict[str, Any]:
    """Small limits, a fast password hasher (each guess hashes once), no proxy."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "LOGIN_USER_ATTEMPTS": 3,
        "LOGIN_ADDRESS_ATTEMPTS": 5,
        "API_ADDRESS_ATTEMPTS": 3,
        "THROTTLE_WINDOW_SECONDS": 60.0,
        "THROTTLE_LOCKOUT_SECONDS": 600.0,
        "THROTTLE_LOCKOUT_MAX_SECONDS": 3600.0,
        "TRUSTED_PROXY_HOPS": 0,
    }
    return settings.AGENTOPS


@pytest.fixture
def alice(limits: Any, django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="alice", password=PASSWORD)


def sign_in(username: str, password: str, **meta: str) -> Any:
    """One sign-in through the form, from a fresh browser (REMOTE_ADDR 127.0.0.1 unless given)."""
    client = Client(**meta)
    response = client.post(reverse("login"), {"username": username, "password": password})
    response.signed_in = SESSION_KEY in client.session
    return response


def refused(response: Any) -> bool:
    return response.status_code == 429 and "Too many failed sign-in attempts" in (
        response.content.decode()
    )


@pytest.mark.django_db
def test_a_username_past_the_limit_is_refused_even_with_the_right_password(alice: Any) -> None:
    first, second = (sign_in("alice", WRONG) for _ in range(2))
    locked_at = time.monotonic()
    third = sign_in("alice", WRONG)
    right = sign_in("alice", PASSWORD)
    elapsed = math.ceil(time.monotonic() - locked_at)

    assert [first.status_code, second.status_code] == [200, 200]
    assert "Please enter a correct username and password" in first.content.decode()
    # The failure that reaches the limit already says so.
    assert refused(third) and third["Retry-After"] == "600"
    assert refused(right) and not right.signed_in
    assert "Try again in 10 minutes." in right.content.decode()
    # What is left of the lockout: 600 s less the time since it began (seconds on a loaded machine).
    assert 600 - elapsed <= int(right["Retry-After"]) <= 600


@pytest.mark.django_db
def test_someone_guessing_at_an_account_does_not_lock_its_owner_out_from_elsewhere(
    alice: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user(username="bob", password=PASSWORD)
    for _ in range(3):
        sign_in("alice", WRONG)  # from 127.0.0.1: that address's attempts at alice are locked

    from_there = sign_in("alice", PASSWORD)
    bob = sign_in("bob", PASSWORD, REMOTE_ADDR="10.0.0.2")
    alice_at_her_desk = sign_in("alice", PASSWORD, REMOTE_ADDR="10.0.0.2")
    still_guessing = sign_in("alice", WRONG)

    assert refused(from_there) and not from_there.signed_in
    assert bob.status_code == 302 and bob.signed_in
    assert alice_at_her_desk.status_code == 302 and alice_at_her_desk.signed_in
    assert refused(still_guessing), "signing in elsewhere lifts nothing at the guesser's address"


@pytest.mark.django_db
def test_failures_across_many_usernames_lock_the_address(alice: Any) -> None:
    guesses = [sign_in(f"user{n}", WRONG) for n in range(5)]
    from_there = sign_in("alice", PASSWORD)
    from_elsewhere = sign_in("alice", PASSWORD, REMOTE_ADDR="10.0.0.9")

    assert [g.status_code for g in guesses] == [200, 200, 200, 200, 429]
    assert refused(from_there) and not from_there.signed_in
    assert from_elsewhere.status_code == 302 and from_elsewhere.signed_in


@pytest.mark.django_db
def test_a_successful_sign_in_before_the_limit_is_not_delayed_and_resets_the_count(
    alice: Any,
) -> None:
    sign_in("alice", WRONG)
    sign_in("alice", WRONG)
    started = time.monotonic()
    right = sign_in("alice", PASSWORD)
    elapsed = time.monotonic() - started
    # Two more failures after the reset are below the limit of three again.
    after = [sign_in("alice", WRONG, REMOTE_ADDR="10.0.0.3") for _ in range(2)]
    again = sign_in("alice", PASSWORD, REMOTE_ADDR="10.0.0.3")

    assert right.status_code == 302 and right.signed_in and "Retry-After" not in right
    assert elapsed < 5, "nothing waits on the way in"  # generous: a loaded machine
    assert [r.status_code for r in after] == [200, 200]
    assert again.status_code == 302 and again.signed_in


@pytest.mark.django_db
def test_many_right_passwords_from_one_address_are_never_throttled(
    limits: Any, django_user_model: Any
) -> None:
    for n in range(3):
        django_user_model.objects.create_user(username=f"person{n}", password=PASSWORD)

    outcomes = [sign_in(f"person{n % 3}", PASSWORD) for n in range(12)]

    assert [r.status_code for r in outcomes] == [302] * 12
    assert all(r.signed_in for r in outcomes)


@pytest.mark.django_db
def test_the_window_expires_and_so_does_the_lockout(alice: Any, limits: Any) -> None:
    # Window and lockout (Redis expires them) as short as the machine allows: four sign-ins,
    # timed by one now, fit in them twice over.
    paced = time.monotonic()
    sign_in("alice", PASSWORD)
    seconds = max(1, math.ceil(8 * (time.monotonic() - paced)))
    limits.update(THROTTLE_WINDOW_SECONDS=float(seconds), THROTTLE_LOCKOUT_SECONDS=float(seconds))
    sign_in("alice", WRONG)
    sign_in("alice", WRONG)
    time.sleep(seconds + 0.1)
    still_counting = [sign_in("alice", WRONG) for _ in range(2)]
    third = sign_in("alice", WRONG)
    locked = sign_in("alice", PASSWORD)
    time.sleep(seconds + 0.1)
    after_lockout = sign_in("alice", PASSWORD)

    assert [r.status_code for r in still_counting] == [200, 200], "old failures expired"
    assert refused(third) and third["Retry-After"] == str(seconds)
    assert refused(locked)
    assert after_lockout.status_code == 302 and after_lockout.signed_in


@pytest.mark.django_db
def test_a_lockout_soon_after_another_is_twice_as_long_up_to_the_longest(
    alice: Any, limits: Any
) -> None:
    limits.update(
        LOGIN_ADDRESS_ATTEMPTS=100, THROTTLE_LOCKOUT_SECONDS=1.0, THROTTLE_LOCKOUT_MAX_SECONDS=2.0
    )
    waits = []
    for pause in (1.1, 2.1, 0):
        waits.append([sign_in("alice", WRONG) for _ in range(3)][-1]["Retry-After"])
        time.sleep(pause)

    assert waits == ["1", "2", "2"]


@pytest.mark.django_db
def test_the_lockout_is_logged_once_with_who_and_where_but_no_password(
    alice: Any, caplog: Any
) -> None:
    with caplog.at_level(logging.INFO, logger="agentops.plumbing.throttle"):
        for _ in range(4):
            sign_in("alice", WRONG, REMOTE_ADDR="192.0.2.7")

    (record,) = [r for r in caplog.records if r.name == "agentops.plumbing.throttle"]
    line = StructuredFormatter("kv").format(record)
    assert record.levelname == "WARNING"
    assert (record.scope, record.client, record.username) == (
        "login.account",
        "192.0.2.7",
        "alice",
    )
    assert (record.failures, record.lockout_seconds) == (3, 600)
    assert "scope=login.account client=192.0.2.7 username=alice" in line
    assert WRONG not in line and PASSWORD not in line
    assert all(WRONG not in r.getMessage() and WRONG not in str(r.__dict__) for r in caplog.records)


@pytest.mark.django_db
def test_x_forwarded_for_counts_only_behind_a_trusted_proxy(alice: Any, limits: Any) -> None:
    # No trusted proxy: a forged header does not move the guesser to a fresh address.
    for n in range(5):
        sign_in(f"user{n}", WRONG, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")
    forged = sign_in("alice", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.99")
    assert refused(forged)

    # One trusted proxy (at 127.0.0.1): the entry it appended is the client; the ones to its
    # left are whatever the client sent.
    limits["TRUSTED_PROXY_HOPS"] = 1
    for n in range(5):
        sign_in(f"user{n}", WRONG, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}, 192.0.2.50")
    behind_proxy = sign_in("alice", PASSWORD, HTTP_X_FORWARDED_FOR="192.0.2.50")
    other_client = sign_in("alice", PASSWORD, HTTP_X_FORWARDED_FOR="192.0.2.51")

    assert refused(behind_proxy)
    assert other_client.status_code == 302 and other_client.signed_in


@pytest.mark.django_db
def test_an_ipv6_client_is_counted_by_its_64(alice: Any) -> None:
    for n in range(5):
        sign_in(f"user{n}", WRONG, REMOTE_ADDR=f"2001:db8:1:2::{n + 1}")
    same_64 = sign_in("alice", PASSWORD, REMOTE_ADDR="2001:db8:1:2:ffff::1")
    next_64 = sign_in("alice", PASSWORD, REMOTE_ADDR="2001:db8:1:3::1")

    assert refused(same_64)
    assert next_64.status_code == 302
    assert address_bucket("::ffff:192.0.2.1") == "192.0.2.1"
    assert address_bucket("not an address") == "not an address"


@pytest.mark.django_db
def test_the_admin_sign_in_is_throttled_too(limits: Any, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser(username="root", password=PASSWORD)
    for _ in range(3):
        Client().post(reverse("admin:login"), {"username": "root", "password": WRONG})
    client = Client()
    response = client.post(reverse("admin:login"), {"username": "root", "password": PASSWORD})

    assert "Too many failed sign-in attempts. Try again in 10 minutes." in response.content.decode()
    assert response.status_code == 429 and 0 < int(response["Retry-After"]) <= 600
    assert SESSION_KEY not in client.session


@pytest.mark.django_db
def test_a_limit_of_zero_turns_that_scope_off(alice: Any, limits: Any) -> None:
    limits["LOGIN_USER_ATTEMPTS"] = 0
    for _ in range(4):
        sign_in("alice", WRONG)

    assert Scope.LOGIN_ACCOUNT.attempts == 0
    assert sign_in("alice", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_without_redis_attempts_are_let_through_and_the_lapse_is_logged(
    alice: Any, settings: Any, caplog: Any
) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    with caplog.at_level(logging.ERROR, logger="agentops.plumbing.throttle"):
        wrong = [sign_in("alice", WRONG) for _ in range(4)]
        right = sign_in("alice", PASSWORD)

    assert [r.status_code for r in wrong] == [200] * 4
    assert right.status_code == 302 and right.signed_in
    # Said once, then Redis is left alone for a while instead of costing every request a timeout.
    (lapse,) = [r for r in caplog.records if r.name == "agentops.plumbing.throttle"]
    assert lapse.getMessage().startswith("agentops.throttle.unavailable: Redis did not answer")


@pytest.mark.django_db
def test_an_operator_sees_and_lifts_a_lockout_with_the_throttle_command(
    alice: Any, capsys: Any
) -> None:
    locked_at = time.monotonic()
    for n in range(5):
        sign_in("alice" if n < 3 else f"user{n}", WRONG)
    call_command("throttle", "status", "--user", "alice", "--address", "127.0.0.1")
    elapsed = math.ceil(time.monotonic() - locked_at)
    before = capsys.readouterr().out.splitlines()
    call_command("throttle", "clear", "--address", "127.0.0.1")
    still_from_here = sign_in("alice", PASSWORD)
    call_command("throttle", "clear", "--user", "alice", "--address", "127.0.0.1")
    after = capsys.readouterr().out.splitlines()
    lifted = sign_in("alice", PASSWORD)

    # Each lockout is shown with what is left of it: 600 s less the seconds since it began.
    lockouts = {
        "login.account\talice from 127.0.0.1": before[0],
        "login.address\t127.0.0.1": before[1],
    }
    for key, line in lockouts.items():
        shown = re.fullmatch(rf"{key}\t0 failure\(s\)\tlocked for (\d+) s", line)
        assert shown and 600 - elapsed <= int(shown[1]) <= 600, line
    assert before[2] == "api.address\t127.0.0.1\t0 failure(s)\tnot locked"
    assert refused(still_from_here), "alice is still locked at that address"
    assert after[-3:] == [
        "login.account\talice from 127.0.0.1\t0 failure(s)\tnot locked",
        "login.address\t127.0.0.1\t0 failure(s)\tnot locked",
        "api.address\t127.0.0.1\t0 failure(s)\tnot locked",
    ]
    assert lifted.status_code == 302 and lifted.signed_in
    with pytest.raises(CommandError, match="name an --address"):
        call_command("throttle", "clear", "--user", "alice")
