"""Notifications: a gate opening, a gate near its timeout and a stopped task reach the right
people once, by email (Django's locmem and file backends) and by signed webhook (a local HTTP
receiver), with a working link; failures are retried with backoff and finally marked failed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import time as clock
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.test import Client
from django.utils import timezone

from agentops.models import Gate, Task
from agentops.services import task_create
from reviews.models import (
    Delivery,
    Notice,
    NotificationPreference,
    NotificationRoute,
    WebhookEndpoint,
)
from reviews.notifications import delivery_send, notices_find, notifications_sweep
from reviews.states import DeliveryStatus, NoticeEvent
from tests.conftest import wait_for
from tests.reviews.builders import client_for, gated_refund, stopped_trip

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "shared-secret-for-tests"


class Receiver:
    """A local webhook receiver: records each request and answers `status`."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


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
    sim_server, redis_clean, mailbox, receiver, operator, operator2, starter
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
    sim_server, redis_clean, mailbox, operator, starter, auditor
):
    with_email(operator, starter, auditor)
    gated_refund(created_by=starter)

    notices_find()
    send_all()

    assert [m.to for m in mailbox] == [["olga@example.com"]]


def test_a_rule_route_sends_that_rules_gates_to_its_group(
    sim_server, redis_clean, mailbox, operator, auditor
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
    sim_server, redis_clean, mailbox, receiver, operator
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


def test_a_failed_attempt_waits_out_its_backoff(
    sim_server, redis_clean, mailbox, receiver, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "NOTIFY_BACKOFF_SECONDS": 60.0}
    receiver.status = 503
    endpoint = WebhookEndpoint.objects.create(name="slow", url=receiver.url, secret=SECRET)
    NotificationRoute.objects.create(endpoint=endpoint)
    gated_refund()
    notices_find()

    assert send_all() == ["attempt 1 failed"]
    delivery = Delivery.objects.get(endpoint=endpoint)
    assert delivery_send(delivery_id=delivery.pk) == "nothing to send"
    wait = delivery.next_attempt_at - timezone.now()
    assert timedelta(seconds=50) < wait <= timedelta(seconds=60)


def test_preferences_choose_events_and_quiet_hours_hold_email_back(
    sim_server, redis_clean, mailbox, operator, operator2
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


def test_a_gate_near_its_timeout_is_announced_once(sim_server, redis_clean, mailbox, operator):
    with_email(operator)
    task = gated_refund()
    Gate.objects.filter(task=task).update(due_at=timezone.now() + timedelta(minutes=5))

    notices_find()
    notices_find()

    events = sorted(Notice.objects.values_list("event", flat=True))
    assert events == [NoticeEvent.GATE_DUE_SOON, NoticeEvent.GATE_OPENED]


def test_a_stopped_task_is_announced_with_a_link_to_its_recovery_panel(
    sim_server, redis_clean, mailbox, operator
):
    with_email(operator)
    task = stopped_trip()

    notices_find()
    send_all()

    notice = Notice.objects.get(event=NoticeEvent.TASK_STOPPED)
    assert notice.subject.startswith(f"task:{task.pk}@")
    assert notice.link.endswith(f"/review/tasks/{task.pk}/recover")
    assert [m.to for m in mailbox] == [["olga@example.com"]]
    assert client_for(operator).get(urlparse(notice.link).path).status_code == 200


def test_a_slack_body_escapes_what_the_goal_says(sim_server, redis_clean, mailbox, receiver):
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


def test_the_sweeper_and_a_worker_deliver_a_notice_end_to_end(processes, tmp_path, operator):
    with_email(operator)
    mail_dir = tmp_path / "mail"
    processes.env.update(
        DJANGO_EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
        DJANGO_EMAIL_FILE_PATH=str(mail_dir),
    )
    task = task_create(agent="refund", goal="Refund order B2002", input={"order_id": "B2002"})
    processes.worker()
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
    token = first.split('<code class="token">')[1].split("</code>")[0]
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
