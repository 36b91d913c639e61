"""Notifications: a gate opening, a gate near its timeout and a stopped task reach the right
people once, by email (Django's locmem and file backends) and by signed webhook (a local HTTP
receiver), with a working link; failures are retried with backoff and finally marked failed.

Every attempt is counted and committed before it sends and holds no transaction or lock while it
waits; a receiver that accepts and never answers (a real socket, for SMTP and for webhooks) holds
a worker no longer than its timeout, and an attempt whose worker died is counted, never lost.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import smtplib
import time
from collections.abc import Callable, Iterator
from datetime import time as clock
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from rq.timeouts import JobTimeoutException, UnixSignalDeathPenalty

from agentops.engine import task_create
from agentops.engine.outbound import OutboundInTransaction
from agentops.models import Gate, Task
from agentops.plumbing import queues
from agentops.states import TaskStatus
from reviews.models import (
    Delivery,
    Notice,
    NotificationPreference,
    NotificationRoute,
    WebhookEndpoint,
)
from reviews.notifications import delivery_send, notices_find, notifications_sweep
from reviews.services import delivery_attempt_begin, delivery_attempt_record
from reviews.states import DeliveryChannel, DeliveryStatus, NoticeEvent
from tests.blackhole import BlackHole
from tests.conftest import wait_for
from tests.reviews.builders import client_for, due_delivery, gated_refund, stopped_trip
from tests.serving import serve_in_thread

pytestmark = pytest.mark.django_db

SECRET = "shared-secret-for-tests"


class Receiver:
    """A local webhook receiver: records each request and answers `status`."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.status = 200
        # Called while the request is held open, before the answer (to look at the database).
        self.during: Callable[[], None] | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                if receiver.during is not None:
                    receiver.during()
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        serve_in_thread(self.server)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


@pytest.fixture
def mailbox(settings: Any) -> list[Any]:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "PUBLIC_URL": "https://agentops.example.com",
        "NOTIFY_BACKOFF_SECONDS": 0.0,
        "NOTIFY_MAX_ATTEMPTS": 3,
    }
    mail.outbox = []
    return mail.outbox


def with_email(*users: Any) -> None:
    for user in users:
        user.email = f"{user.username}@example.com"
        user.save(update_fields=["email"])


def send_all() -> list[str]:
    """Run every due delivery through the job's function, as a worker would."""
    return [
        delivery_send(delivery_id=pk)
        for pk in Delivery.objects.filter(status=DeliveryStatus.PENDING).values_list(
            "pk", flat=True
        )
    ]


def signature_ok(headers: dict[str, str], body: bytes) -> bool:
    message = headers["X-Agentops-Timestamp"].encode() + b"." + body
    expected = hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Agentops-Signature"], f"sha256={expected}")


def test_a_gate_opening_sends_one_email_and_one_signed_webhook_with_a_working_link(
    sim, redis_clean, mailbox, receiver, operator, operator2, starter
):
    with_email(operator, operator2, starter)
    endpoint = WebhookEndpoint.objects.create(name="chat", url=receiver.url, secret=SECRET)
    NotificationRoute.objects.create(endpoint=endpoint)
    NotificationRoute.objects.create(group=Group.objects.get(name="operators"))
    task = gated_refund(created_by=starter)
    gate = Gate.objects.get(task=task)

    notifications_sweep()
    notifications_sweep()  # a second scan finds nothing new
    results = send_all()

    assert Notice.objects.filter(event=NoticeEvent.GATE_OPENED).count() == 1
    assert results == ["sent"] * 3
    assert sorted(m.to[0] for m in mailbox) == ["olga@example.com", "otto@example.com"]
    link = f"https://agentops.example.com/review/gates/{gate.pk}"
    assert all(link in m.body for m in mailbox)
    ((headers, body),) = receiver.requests
    payload = json.loads(body)
    assert signature_ok(headers, body)
    assert headers["X-Agentops-Event"] == "gate_opened"
    assert payload["link"] == link and payload["gate"]["id"] == gate.pk
    page = client_for(operator).get(urlparse(link).path)
    assert page.status_code == 200 and "Approve" in page.content.decode()


def test_without_a_route_the_gates_approver_group_is_emailed_but_not_the_starter(
    sim, redis_clean, mailbox, operator, starter, auditor
):
    with_email(operator, starter, auditor)
    gated_refund(created_by=starter)

    notices_find()
    send_all()

    assert [m.to for m in mailbox] == [["olga@example.com"]]


def test_a_rule_route_sends_that_rules_gates_to_its_group(
    sim, redis_clean, mailbox, operator, auditor
):
    with_email(operator, auditor)
    task = gated_refund()
    rule = Gate.objects.get(task=task).rule
    NotificationRoute.objects.create(rule=rule, group=Group.objects.get(name="auditors"))
    NotificationRoute.objects.create(rule="another rule", group=Group.objects.get(name="operators"))

    notices_find()
    send_all()

    assert [m.to for m in mailbox] == [["audrey@example.com"]]


def test_a_failing_receiver_is_retried_then_marked_failed_without_blocking_email(
    sim, redis_clean, mailbox, receiver, operator
):
    with_email(operator)
    receiver.status = 500
    endpoint = WebhookEndpoint.objects.create(name="down", url=receiver.url, secret=SECRET)
    NotificationRoute.objects.create(endpoint=endpoint)
    NotificationRoute.objects.create(group=Group.objects.get(name="operators"))
    gated_refund()
    notices_find()

    first = send_all()
    second = send_all()
    third = send_all()
    webhook = Delivery.objects.get(endpoint=endpoint)

    assert sorted(first) == ["attempt 1 failed", "sent"]
    assert second == ["attempt 2 failed"] and third == ["attempt 3 failed"]
    assert webhook.status == DeliveryStatus.FAILED and webhook.attempts == 3
    assert "HTTP 500" in webhook.last_error
    assert len(receiver.requests) == 3
    assert len(mailbox) == 1
    assert send_all() == []  # a failed delivery is not sent again


def test_a_failed_attempt_waits_out_its_backoff(sim, redis_clean, mailbox, receiver, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "NOTIFY_BACKOFF_SECONDS": 60.0}
    receiver.status = 503
    endpoint = WebhookEndpoint.objects.create(name="slow", url=receiver.url, secret=SECRET)
    NotificationRoute.objects.create(endpoint=endpoint)
    gated_refund()
    notices_find()

    sending = timezone.now()
    assert send_all() == ["attempt 1 failed"]
    failed = timezone.now()
    delivery = Delivery.objects.get(endpoint=endpoint)
    assert delivery_send(delivery_id=delivery.pk) == "nothing to send"
    # 60 s after the failed attempt, which came between `sending` and `failed`.
    backoff = timedelta(seconds=60)
    assert sending + backoff <= delivery.next_attempt_at <= failed + backoff


def test_preferences_choose_events_and_quiet_hours_hold_email_back(
    sim, redis_clean, mailbox, operator, operator2
):
    with_email(operator, operator2)
    NotificationPreference.objects.create(user=operator, events=[NoticeEvent.TASK_STOPPED])
    now = timezone.localtime()
    NotificationPreference.objects.create(
        user=operator2,
        quiet_from=(now - timedelta(hours=1)).time().replace(second=0, microsecond=0),
        quiet_until=(now + timedelta(hours=2)).time().replace(second=0, microsecond=0),
    )
    gated_refund()

    notices_find()
    held = Delivery.objects.get(user=operator2)

    assert not Delivery.objects.filter(user=operator).exists()
    assert held.next_attempt_at > timezone.now() + timedelta(hours=1, minutes=50)
    assert send_all() == ["nothing to send"]
    assert mailbox == []


def test_with_no_open_gate_and_no_stopped_task_a_sweep_looks_twice_and_records_nothing(
    django_assert_num_queries,
):
    Task.objects.create(agent="refund", goal="waiting for a worker")  # queued: nothing to tell

    with django_assert_num_queries(2):
        assert notices_find() == []

    assert not Notice.objects.exists()


def test_a_gate_near_its_timeout_is_announced_once(sim, redis_clean, mailbox, operator):
    with_email(operator)
    task = gated_refund()
    Gate.objects.filter(task=task).update(due_at=timezone.now() + timedelta(minutes=5))

    notices_find()
    notices_find()

    events = sorted(Notice.objects.values_list("event", flat=True))
    assert events == [NoticeEvent.GATE_DUE_SOON, NoticeEvent.GATE_OPENED]


def test_a_stopped_task_is_announced_with_a_link_to_its_recovery_panel(
    sim, redis_clean, mailbox, operator
):
    with_email(operator)
    task = stopped_trip()

    notices_find()
    send_all()

    notice = Notice.objects.get(event=NoticeEvent.TASK_STOPPED)
    assert notice.subject.startswith(f"task:{task.pk}@")
    assert notice.link == f"/review/tasks/{task.pk}/recover"
    assert [m.to for m in mailbox] == [["olga@example.com"]]
    assert client_for(operator).get(urlparse(notice.link).path).status_code == 200


def test_links_are_built_when_the_message_is_sent_from_the_public_url_then(
    sim, redis_clean, mailbox, operator, settings
):
    with_email(operator)
    gate = Gate.objects.get(task=gated_refund())
    notices_find()  # the notice is made while the product is at one address ...
    settings.AGENTOPS = {**settings.AGENTOPS, "PUBLIC_URL": "http://127.0.0.1:8123"}

    send_all()  # ... and sent once it has moved

    assert Notice.objects.get().link == f"/review/gates/{gate.pk}"
    (message,) = mailbox
    assert f"Open it: http://127.0.0.1:8123/review/gates/{gate.pk}\n" in message.body


def test_a_slack_body_escapes_what_the_goal_says(sim, redis_clean, mailbox, receiver):
    endpoint = WebhookEndpoint.objects.create(
        name="slack", url=receiver.url, secret=SECRET, body_format="slack"
    )
    NotificationRoute.objects.create(endpoint=endpoint)
    gated_refund(goal="Refund <https://evil.example|click here> & <!channel>")

    notices_find()
    send_all()

    ((headers, body),) = receiver.requests
    text = json.loads(body)["text"]
    assert "<https://evil.example" not in text and "<!channel>" not in text
    assert "&lt;https://evil.example|click here&gt; &amp; &lt;!channel&gt;" in text
    assert text.endswith("|Open in agentops>")
    assert signature_ok(headers, body)


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_and_a_worker_deliver_a_notice_end_to_end(processes, tmp_path, operator):
    with_email(operator)
    mail_dir = tmp_path / "mail"
    processes.env.update(
        DJANGO_EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
        DJANGO_EMAIL_FILE_PATH=str(mail_dir),
    )
    task = task_create(agent="refund", goal="Refund order B2002", input={"order_id": "B2002"})
    processes.worker()
    processes.notices_worker()
    processes.sweeper()

    wait_for(
        lambda: Delivery.objects.filter(status=DeliveryStatus.SENT).exists(),
        timeout=60,
        message="the gate's email to be sent",
    )
    messages = [path.read_text() for path in Path(mail_dir).glob("*.log")]

    assert Task.objects.get(pk=task.pk).status == "awaiting_approval"
    assert len(messages) == 1 and "olga@example.com" in messages[0]
    assert f"/review/gates/{Gate.objects.get(task=task).pk}" in messages[0]


# -- attempts: counted before, recorded after, never waited on inside a transaction ------------

HOLE_TIMEOUT = 1.0  # the SMTP and webhook timeouts of the black-hole tests, in seconds


def smtp_to(settings: Any, hole: BlackHole, *, timeout: float) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", hole.port
    settings.EMAIL_TIMEOUT = timeout


# The receiver looks from another connection: the attempt must be committed.
@pytest.mark.django_db(transaction=True)
def test_an_attempt_is_committed_before_the_request_and_holds_no_lock_while_it_waits(
    redis_clean, mailbox, receiver
):
    endpoint = WebhookEndpoint.objects.create(name="look", url=receiver.url, secret=SECRET)
    delivery = due_delivery(endpoint=endpoint)
    seen: dict[str, Any] = {}

    def look() -> None:
        # Another connection, while the request is held open by the receiver.
        try:
            seen["row"] = Delivery.objects.values("status", "attempts", "attempt_started_at").get(
                pk=delivery.pk
            )
            with transaction.atomic():
                rows = Delivery.objects.select_for_update(nowait=True).filter(pk=delivery.pk)
                seen["locked_by_us"] = len(list(rows))
            seen["second_job"] = delivery_send(delivery_id=delivery.pk)
        finally:
            connection.close()

    receiver.during = look
    result = delivery_send(delivery_id=delivery.pk)
    delivery.refresh_from_db()

    assert seen["row"]["status"] == DeliveryStatus.PENDING
    assert seen["row"]["attempts"] == 1 and seen["row"]["attempt_started_at"] is not None
    assert seen["locked_by_us"] == 1  # NOWAIT: no transaction of the sender holds the row
    assert seen["second_job"] == "nothing to send"  # the attempt in flight is not sent twice
    assert result == "sent" and len(receiver.requests) == 1
    assert delivery.status == DeliveryStatus.SENT and delivery.attempts == 1
    assert delivery.attempt_started_at is None


def test_an_smtp_server_that_never_answers_fails_the_attempt_within_email_timeout(
    redis_clean, mailbox, black_hole, settings, operator
):
    with_email(operator)
    # The same attempt to a mailbox that answers at once: what an attempt costs besides its
    # wait at this machine's present pace.
    paced = time.monotonic()
    assert delivery_send(delivery_id=due_delivery(user=operator).pk) == "sent"
    paced = time.monotonic() - paced
    smtp_to(settings, black_hole, timeout=HOLE_TIMEOUT)
    delivery = due_delivery(user=operator)

    started = time.monotonic()
    result = delivery_send(delivery_id=delivery.pk)
    took = time.monotonic() - started
    delivery.refresh_from_db()

    assert result == "attempt 1 failed"
    # The wait, and the attempt's own work with room for the connection and the error's record.
    assert took < HOLE_TIMEOUT + 1.5 + 3 * paced
    assert len(black_hole.connections) == 1
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert delivery.attempt_started_at is None
    # smtplib gives up on the silent greeting with its own error (the class, not its words).
    assert delivery.last_error.startswith(f"{smtplib.SMTPServerDisconnected.__name__}: ")


def test_what_a_refusing_smtp_server_says_is_stored_with_its_secrets_redacted(
    redis_clean, mailbox, settings, operator
):
    token = "Bearer abcdefghijklmnopqrstuvwxyz0123456789"
    hole = BlackHole(greeting=f"554 relay refused for {token}\r\n".encode())
    with_email(operator)
    smtp_to(settings, hole, timeout=HOLE_TIMEOUT)
    delivery = due_delivery(user=operator)

    try:
        result = delivery_send(delivery_id=delivery.pk)
    finally:
        hole.close()
    delivery.refresh_from_db()

    assert result == "attempt 1 failed"
    assert delivery.last_error.startswith("SMTPConnectError: (554, b'relay refused for")
    assert "abcdefghijklmnop" not in delivery.last_error and "[redacted]" in delivery.last_error


def test_an_attempt_cut_off_by_the_jobs_timeout_is_recorded_with_its_error(
    redis_clean, mailbox, black_hole, settings, operator
):
    with_email(operator)
    smtp_to(settings, black_hole, timeout=30.0)  # the job's deadline comes first
    delivery = due_delivery(user=operator)

    with pytest.raises(JobTimeoutException), UnixSignalDeathPenalty(1, JobTimeoutException):
        delivery_send(delivery_id=delivery.pk)
    delivery.refresh_from_db()

    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert delivery.attempt_started_at is None
    assert delivery.last_error.startswith("JobTimeoutException")


def test_an_attempt_whose_worker_died_counts_once_its_deadline_passed_then_waits_its_backoff(
    redis_clean, mailbox, clock, settings
):
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "NOTIFY_ATTEMPT_TIMEOUT_SECONDS": 30.0,
        "SWEEP_GRACE_SECONDS": 5.0,
        "NOTIFY_BACKOFF_SECONDS": 10.0,
    }
    endpoint = WebhookEndpoint.objects.create(name="gone", url="http://127.0.0.1:9/", secret=SECRET)
    delivery = due_delivery(endpoint=endpoint)
    queue = queues.queue(queues.NOTICES)
    in_flight, after_deadline, after_backoff = [], [], []

    for attempt in (1, 2, 3):
        # What a worker killed mid-send leaves behind: the attempt claimed and committed.
        assert delivery_attempt_begin(delivery_id=delivery.pk, window=timedelta(seconds=35)) == (
            attempt
        )
        started = clock.now
        clock.at(started + timedelta(seconds=34))
        in_flight.append(notifications_sweep())
        clock.at(started + timedelta(seconds=36))
        after_deadline.append(notifications_sweep())
        clock.at(started + timedelta(seconds=36 + 10 * 2 ** (attempt - 1)))
        after_backoff.append(notifications_sweep())
    delivery.refresh_from_db()

    assert in_flight == [0, 0, 0]  # an attempt in flight is never re-enqueued blind
    assert after_deadline == [0, 0, 0]  # counted as failed, then its backoff
    assert after_backoff == [1, 1, 0]  # the third attempt was the last
    assert queue.job_ids == [f"deliver-{delivery.pk}-1", f"deliver-{delivery.pk}-2"]
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 3
    assert delivery.attempt_started_at is None
    assert delivery.last_error.startswith("Abandoned: the attempt started at")


def test_the_late_outcome_of_an_attempt_counted_as_abandoned_changes_nothing(
    redis_clean, mailbox, clock
):
    endpoint = WebhookEndpoint.objects.create(name="late", url="http://127.0.0.1:9/", secret=SECRET)
    delivery = due_delivery(endpoint=endpoint)
    window = timedelta(seconds=35)

    first = delivery_attempt_begin(delivery_id=delivery.pk, window=window)
    clock.at(clock.now + timedelta(seconds=36))
    notifications_sweep()
    second = delivery_attempt_begin(delivery_id=delivery.pk, window=window)
    late = delivery_attempt_record(
        delivery_id=delivery.pk, attempt=1, target=DeliveryStatus.SENT, sent_at=clock.now
    )
    delivery.refresh_from_db()

    assert (first, second, late) == (1, 2, False)
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 2
    assert delivery.attempt_started_at == clock.now


def test_a_delivery_sent_from_inside_a_transaction_is_refused_before_anything_is_sent(
    redis_clean, mailbox, receiver
):
    endpoint = WebhookEndpoint.objects.create(name="inside", url=receiver.url, secret=SECRET)
    delivery = due_delivery(endpoint=endpoint)

    with pytest.raises(OutboundInTransaction), transaction.atomic():
        delivery_send(delivery_id=delivery.pk)
    delivery.refresh_from_db()

    assert receiver.requests == []
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 0


@pytest.mark.parametrize("channel", [DeliveryChannel.EMAIL, DeliveryChannel.WEBHOOK])
@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_never_answers_frees_the_worker_within_its_timeout_and_fails_at_the_cap(
    channel, processes, black_hole, operator
):
    with_email(operator)
    processes.env.update(
        DJANGO_EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        DJANGO_EMAIL_HOST="127.0.0.1",
        DJANGO_EMAIL_PORT=str(black_hole.port),
        DJANGO_EMAIL_TIMEOUT=str(HOLE_TIMEOUT),
        AGENTOPS_WEBHOOK_TIMEOUT_SECONDS=str(HOLE_TIMEOUT),
        AGENTOPS_NOTIFY_MAX_ATTEMPTS="3",
        AGENTOPS_NOTIFY_BACKOFF_SECONDS="0.5",
    )
    if channel == DeliveryChannel.EMAIL:
        delivery = due_delivery(user=operator)
    else:
        hook = f"http://127.0.0.1:{black_hole.port}/hook"
        delivery = due_delivery(
            endpoint=WebhookEndpoint.objects.create(name="hole", url=hook, secret=SECRET)
        )
    processes.notices_worker()
    processes.sweeper()

    wait_for(lambda: black_hole.connections, timeout=60, message="the first attempt")
    wait_for(
        lambda: Delivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.FAILED).exists(),
        timeout=60,
        message="the delivery to fail at its cap",
    )
    delivery.refresh_from_db()
    wait_for(lambda: len(black_hole.held_seconds()) == 3, timeout=5, message="three hang-ups")

    assert len(black_hole.connections) == 3
    assert all(held < HOLE_TIMEOUT + 1.5 for held in black_hole.held_seconds())
    assert delivery.attempts == 3 and delivery.attempt_started_at is None
    # Each client's own error for a peer that accepted and never answered (its class, not words).
    gave_up = (
        smtplib.SMTPServerDisconnected if channel == DeliveryChannel.EMAIL else httpx.ReadTimeout
    )
    assert delivery.last_error.startswith(f"{gave_up.__name__}: ")


HELD_SECONDS = 60  # how long the black-holed SMTP server holds the notices' worker


@pytest.mark.django_db(transaction=True)
def test_a_notice_held_by_a_silent_smtp_server_slows_no_step(processes, black_hole, operator):
    """Notices have a queue and workers of their own: while the notices' worker waits on a
    silent SMTP server, the steps' worker runs a task start to end."""
    with_email(operator)
    processes.env.update(
        DJANGO_EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        DJANGO_EMAIL_HOST="127.0.0.1",
        DJANGO_EMAIL_PORT=str(black_hole.port),
        DJANGO_EMAIL_TIMEOUT=str(HELD_SECONDS),
        AGENTOPS_NOTIFY_ATTEMPT_TIMEOUT_SECONDS=str(HELD_SECONDS),
    )
    delivery = due_delivery(user=operator)
    processes.worker()
    processes.notices_worker()
    processes.sweeper()
    wait_for(lambda: black_hole.connections, timeout=120, message="the notice's attempt")
    started = time.monotonic()

    task = task_create(agent="bench_noop", goal="meanwhile", input={"steps": 3, "payload_kb": 0})
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_terminal, timeout=120, message="the task to end"
    )
    took = time.monotonic() - started
    print(f"a 3-step task ran start to end in {took:.2f} s while a notice was held")

    assert Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED
    # The attempt still held the notices' worker: nothing of the task waited for it.
    assert black_hole.connections[0][1] is None
    assert Delivery.objects.get(pk=delivery.pk).attempt_started_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_attempt_counts_it_and_the_jobs_timeout_ends_the_next_ones(
    processes, black_hole, operator
):
    with_email(operator)
    processes.env.update(
        DJANGO_EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        DJANGO_EMAIL_HOST="127.0.0.1",
        DJANGO_EMAIL_PORT=str(black_hole.port),
        DJANGO_EMAIL_TIMEOUT="30",  # longer than the attempt's deadline below
        AGENTOPS_NOTIFY_ATTEMPT_TIMEOUT_SECONDS="3",
        AGENTOPS_NOTIFY_MAX_ATTEMPTS="3",
        AGENTOPS_NOTIFY_BACKOFF_SECONDS="0",
    )
    delivery = due_delivery(user=operator)
    doomed = processes.notices_worker()
    processes.sweeper()

    wait_for(lambda: black_hole.connections, timeout=60, message="the first attempt")
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=10)
    killed = Delivery.objects.get(pk=delivery.pk)
    abandoned = wait_for(
        lambda: Delivery.objects.filter(pk=delivery.pk, last_error__startswith="Abandoned").first(),
        timeout=30,
        message="the sweeper to count the abandoned attempt",
    )
    processes.notices_worker()
    wait_for(
        lambda: Delivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.FAILED).exists(),
        timeout=60,
        message="the delivery to fail at its cap",
    )
    delivery.refresh_from_db()

    assert killed.attempts == 1 and killed.attempt_started_at is not None
    assert abandoned.attempts == 1 and abandoned.attempt_started_at is None
    assert len(black_hole.connections) == 3
    assert delivery.attempts == 3 and delivery.attempt_started_at is None
    assert delivery.last_error.startswith("JobTimeoutException")


def test_the_account_page_saves_preferences_and_refuses_half_quiet_hours(operator):
    client = client_for(operator)

    half = client.post("/review/account", {"email": "on", "quiet_from": "22:00"})
    saved = client.post(
        "/review/account",
        {"events": ["task_stopped"], "email": "on", "quiet_from": "22:00", "quiet_until": "07:00"},
    )
    preference = NotificationPreference.objects.get(user=operator)

    assert half.status_code == 400 and "both ends" in half.content.decode()
    assert saved.status_code == 302
    assert preference.events == ["task_stopped"]
    assert (preference.quiet_from, preference.quiet_until) == (clock(22), clock(7))


def test_a_token_made_on_the_account_page_is_shown_once_and_works_until_revoked(operator):
    client = client_for(operator)

    client.post("/review/account/tokens", {"name": "ci bot"})
    first = client.get("/review/account").content.decode()
    second = client.get("/review/account").content.decode()
    token = first.split('<code class="token" translate="no">')[1].split("</code>")[0]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    works = api.get("/api/v1/tasks").status_code
    row = operator.api_tokens.get()
    revoke = client.post(f"/review/account/tokens/{row.pk}/revoke")
    other = client_for(operator).post(f"/review/account/tokens/{row.pk}/revoke")

    assert token.startswith("ao_") and token not in second
    assert "ci bot" in second
    assert works == 200
    assert revoke.status_code == 302 and other.status_code == 404
    assert api.get("/api/v1/tasks").status_code == 401
