"""Notifications: people hear where they work that a gate opened, that a gate nears its timeout,
or that a task stopped for a human, by email and by signed webhook, with a link to the panel.

The database is the truth here too. `notifications_sweep()` runs inside every sweep: it finds what
happened from the rows (so nothing is lost when a process dies between the event and the
notice), records each event once as a `Notice` (a unique constraint makes the scan idempotent),
fans it out into one `Delivery` per recipient and channel, and enqueues the deliveries that are
due. `delivery_send()` is the RQ job: it sends one delivery at least once and records the
outcome; a failure is retried with backoff by later sweeps until the attempt cap, then the
delivery is marked failed. Nothing else waits on a delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import django_rq
import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import CharField, Exists, OuterRef, Q, Subquery, Value
from django.db.models.functions import Cast, Concat
from django.urls import reverse
from django.utils import timezone

from agentops.engine.dispatch import job_waiting
from agentops.logs import job_meta
from agentops.models import Event, Gate, Task
from agentops.states import GateStatus, TaskStatus
from reviews.models import Delivery, Notice, NotificationPreference, NotificationRoute
from reviews.services import delivery_attempt_record
from reviews.states import Channel, DeliveryStatus, NoticeEvent, Role, WebhookFormat

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

STOP_EVENT = "agentops.task.stopped"


def _conf(name: str) -> Any:
    return settings.AGENTOPS[name]


def public_link(path: str) -> str:
    """An absolute link for a message read outside the product (AGENTOPS_PUBLIC_URL)."""
    return f"{_conf('PUBLIC_URL').rstrip('/')}{path}"


# -- finding what happened ----------------------------------------------------------------------


def _unnoticed(queryset: Any, event: str, subject: Any) -> Any:
    """`queryset` without the rows whose (event, subject) notice exists already; `subject` is
    an expression over the outer row (OuterRef)."""
    return queryset.annotate(
        noticed=Exists(Notice.objects.filter(event=event, subject=subject))
    ).filter(noticed=False)


def _gate_text(gate: Gate, event: str) -> str:
    what = "waits for approval" if event == NoticeEvent.GATE_OPENED else "times out soon"
    return (
        f"Task {gate.task_id} ({gate.task.agent}): '{gate.tool}' {what} "
        f"(rule {gate.rule}; due {gate.due_at:%Y-%m-%d %H:%M %Z}). Goal: {gate.task.goal}"
    )


def notices_find() -> list[Notice]:
    """Record a Notice for every event nobody has been told about yet."""
    created: list[Notice] = []
    open_gates = Gate.objects.filter(status=GateStatus.OPEN).select_related("task")
    gate_subject = Concat(Value("gate:"), Cast(OuterRef("pk"), CharField()))
    for gate in _unnoticed(open_gates, NoticeEvent.GATE_OPENED, gate_subject):
        created += _notice_create(NoticeEvent.GATE_OPENED, f"gate:{gate.pk}", gate=gate)
    soon = timezone.now() + timedelta(seconds=_conf("NOTIFY_DUE_SOON_SECONDS"))
    due = open_gates.filter(due_at__lte=soon)
    for gate in _unnoticed(due, NoticeEvent.GATE_DUE_SOON, gate_subject):
        created += _notice_create(NoticeEvent.GATE_DUE_SOON, f"gate:{gate.pk}", gate=gate)
    stop_seq = Subquery(
        Event.objects.filter(task=OuterRef("pk"), action=STOP_EVENT)
        .order_by("-seq")
        .values("seq")[:1]
    )
    stopped = Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION).annotate(stop_seq=stop_seq)
    task_subject = Concat(
        Value("task:"),
        Cast(OuterRef("pk"), CharField()),
        Value("@"),
        Cast(OuterRef("stop_seq"), CharField()),
    )
    for task in _unnoticed(stopped.exclude(stop_seq=None), NoticeEvent.TASK_STOPPED, task_subject):
        created += _notice_create(
            NoticeEvent.TASK_STOPPED, f"task:{task.pk}@{task.stop_seq}", task=task
        )
    return created


def _notice_create(
    event: str, subject: str, *, gate: Gate | None = None, task: Task | None = None
) -> list[Notice]:
    """Create the notice and its deliveries in one transaction; [] if another sweep did."""
    if gate is not None:
        task = gate.task
        text = _gate_text(gate, event)
        link = public_link(reverse("reviews:gate", args=[gate.pk]))
    else:
        assert task is not None
        kind = (task.failure or {}).get("kind", "unknown")
        text = f"Task {task.pk} ({task.agent}) stopped for a human ({kind}). Goal: {task.goal}"
        link = public_link(reverse("reviews:recover", args=[task.pk]))
    try:
        with transaction.atomic():
            notice = Notice.objects.create(
                event=event,
                subject=subject,
                task=task,
                gate=gate,
                rule=gate.rule if gate else "",
                text=text,
                link=link,
            )
            _deliveries_create(notice)
    except IntegrityError:
        return []  # a concurrent sweep recorded it first
    return [notice]


# -- who hears about it -------------------------------------------------------------------------


def _routes(notice: Notice) -> list[NotificationRoute]:
    return list(
        NotificationRoute.objects.filter(
            Q(rule="") | Q(rule=notice.rule), Q(event="") | Q(event=notice.event)
        ).select_related("group", "endpoint")
    )


def _default_group(notice: Notice) -> str:
    if notice.gate is not None:
        return notice.gate.approver_group
    return Role.OPERATORS


def _deliveries_create(notice: Notice) -> None:
    """One delivery per recipient and channel, per the routes (or the default group)."""
    routes = _routes(notice)
    groups = {route.group.name for route in routes if route.group is not None}
    endpoints = {route.endpoint for route in routes if route.endpoint and route.endpoint.active}
    if not routes:
        groups = {_default_group(notice)}
    now = timezone.now()
    users = (
        get_user_model()
        .objects.filter(groups__name__in=groups, is_active=True)
        .exclude(email="")
        .select_related("notification_preference")
        .distinct()
    )
    if notice.gate is not None and notice.task.created_by_id:
        # Separation of duties: whoever started the task cannot approve its gates.
        users = users.exclude(pk=notice.task.created_by_id)
    rows = [
        Delivery(
            notice=notice, channel=Channel.EMAIL, user=user, next_attempt_at=_after_quiet(user, now)
        )
        for user in users
        if _wants(user, notice.event)
    ]
    rows += [
        Delivery(notice=notice, channel=Channel.WEBHOOK, endpoint=endpoint, next_attempt_at=now)
        for endpoint in sorted(endpoints, key=lambda e: e.pk)
    ]
    Delivery.objects.bulk_create(rows)


def _preference(user: User) -> NotificationPreference | None:
    try:
        return user.notification_preference
    except NotificationPreference.DoesNotExist:
        return None


def _wants(user: User, event: str) -> bool:
    preference = _preference(user)
    if preference is None:
        return True
    return preference.email and (not preference.events or event in preference.events)


def _after_quiet(user: User, now: datetime) -> datetime:
    """`now`, or the end of the user's quiet hours when now falls inside them (server time)."""
    preference = _preference(user)
    if preference is None or preference.quiet_from is None or preference.quiet_until is None:
        return now
    local = timezone.localtime(now)
    start, end = preference.quiet_from, preference.quiet_until
    moment = local.time()
    quiet = start <= moment < end if start < end else (moment >= start or moment < end)
    if not quiet:
        return now
    until = local.replace(hour=end.hour, minute=end.minute, second=0, microsecond=0)
    return until if until > local else until + timedelta(days=1)


# -- sending ------------------------------------------------------------------------------------


def deliveries_enqueue_due() -> int:
    """Enqueue a job for every pending delivery whose time has come; returns how many."""
    due = Delivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now()
    ).values_list("pk", "attempts")
    queue = django_rq.get_queue("default")
    count = 0
    for delivery_id, attempts in due:
        job_id = f"deliver-{delivery_id}-{attempts}"
        if job_waiting(queue, job_id):
            continue  # already waiting in the queue for this attempt
        queue.enqueue(
            "reviews.jobs.delivery_send",
            delivery_id,
            job_id=job_id,
            meta=job_meta(),
            result_ttl=300,
            failure_ttl=86400,
            job_timeout=60,
        )
        count += 1
    return count


def notifications_sweep() -> int:
    """The sweeper's hook: record new notices, then enqueue due deliveries."""
    notices_find()
    return deliveries_enqueue_due()


def delivery_send(*, delivery_id: int) -> str:
    """Send one delivery (the RQ job). At least once: the row lock keeps two jobs from sending
    the same attempt; a crash after sending and before the commit sends it again, and the
    receiver can tell by `X-Agentops-Delivery`."""
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("notice__task", "notice__gate", "user", "endpoint")
            .filter(
                pk=delivery_id,
                status=DeliveryStatus.PENDING,
                next_attempt_at__lte=timezone.now(),
            )
            .first()
        )
        if delivery is None:
            return "nothing to send"
        try:
            _send(delivery)
        except (httpx.HTTPError, OSError, DeliveryRefused) as error:
            return _record_failure(delivery, error)
        delivery_attempt_record(
            delivery_id=delivery.pk,
            target=DeliveryStatus.SENT,
            sent_at=timezone.now(),
            last_error="",
        )
    return "sent"


class DeliveryRefused(Exception):
    """The receiver answered, but not with a 2xx."""


def _record_failure(delivery: Delivery, error: Exception) -> str:
    """Record a failed attempt: pending again after a doubling backoff, or failed at the cap."""
    attempts = delivery.attempts + 1
    last_error = f"{error.__class__.__name__}: {error}"[:1000]
    if attempts >= _conf("NOTIFY_MAX_ATTEMPTS"):
        delivery_attempt_record(
            delivery_id=delivery.pk, target=DeliveryStatus.FAILED, last_error=last_error
        )
    else:
        backoff = _conf("NOTIFY_BACKOFF_SECONDS") * 2 ** (attempts - 1)
        delivery_attempt_record(
            delivery_id=delivery.pk,
            target=DeliveryStatus.PENDING,
            last_error=last_error,
            next_attempt_at=timezone.now() + timedelta(seconds=backoff),
        )
    logger.warning("notification %s attempt %s failed: %s", delivery.pk, attempts, error)
    return f"attempt {attempts} failed"


def _send(delivery: Delivery) -> None:
    if delivery.channel == Channel.EMAIL:
        notice = delivery.notice
        assert delivery.user is not None, "an email delivery has a recipient"
        send_mail(
            subject=f"[agentops] {notice.get_event_display()}: task {notice.task_id}",
            message=f"{notice.text}\n\nOpen it: {notice.link}\n",
            from_email=None,
            recipient_list=[delivery.user.email],
        )
        return
    endpoint = delivery.endpoint
    assert endpoint is not None, "a webhook delivery has an endpoint"
    body = json.dumps(webhook_body(delivery), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    response = httpx.post(
        endpoint.url,
        content=body,
        headers={
            "Content-Type": "application/json",
            "User-Agent": "agentops-notifications",
            "X-Agentops-Event": delivery.notice.event,
            "X-Agentops-Delivery": str(delivery.pk),
            "X-Agentops-Timestamp": timestamp,
            "X-Agentops-Signature": f"sha256={webhook_signature(endpoint.secret, timestamp, body)}",
        },
        timeout=_conf("WEBHOOK_TIMEOUT_SECONDS"),
        follow_redirects=False,
    )
    if not 200 <= response.status_code < 300:
        raise DeliveryRefused(f"HTTP {response.status_code}")


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Hex HMAC-SHA256 of `<timestamp>.<body>`: a receiver recomputes it with the shared
    secret and rejects old timestamps (replays)."""
    message = timestamp.encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn control characters: untrusted text must not form links or mentions.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_body(delivery: Delivery) -> dict[str, Any]:
    notice = delivery.notice
    assert delivery.endpoint is not None, "a webhook delivery has an endpoint"
    if delivery.endpoint.body_format == WebhookFormat.SLACK:
        return {
            "text": f"{_slack_escape(notice.text)} <{notice.link}|Open in agentops>",
        }
    return {
        "event": notice.event,
        "delivery": delivery.pk,
        "task": {
            "id": notice.task_id,
            "agent": notice.task.agent,
            "goal": notice.task.goal,
            "status": notice.task.status,
        },
        "gate": (
            {"id": notice.gate_id, "rule": notice.rule, "due_at": notice.gate.due_at.isoformat()}
            if notice.gate
            else None
        ),
        "text": notice.text,
        "link": notice.link,
    }
