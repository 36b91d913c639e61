"""Notifications: people hear where they work that a gate opened, that a gate nears its timeout,
or that a task stopped for a human, through every registered channel (`reviews.channels`: email
with Approve and Reject links on gates, signed webhooks, Slack messages with Approve and Reject
buttons, and any channel registered elsewhere), with a link to the panel. This module names no
channel: it finds a notice's audience once, asks each channel for its deliveries, and sends each
delivery through the channel it names.

The database is the truth here too. `notifications_sweep()` runs inside every sweep: it finds what
happened from the rows (so nothing is lost when a process dies between the event and the
notice), records each event once as a `Notice` (a unique constraint makes the scan idempotent),
fans it out into one `Delivery` per recipient and channel, and enqueues the deliveries that are
due. `delivery_send()` is the RQ job: it sends one delivery at least once. Each attempt is
counted in a committed UPDATE before anything is sent, sent with a deadline and no transaction
open, and its outcome recorded after; a failure is retried with backoff by later sweeps until the
attempt cap, then the delivery is marked failed with its last error. An attempt whose worker died
counts as failed once its deadline has passed. Nothing else waits on a delivery.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import CharField, Exists, OuterRef, Q, Subquery, Value
from django.db.models.functions import Cast, Concat, Left
from django.urls import reverse
from django.utils import timezone

from agentops.engine import (
    approval_kind_of,
    job_waiting,
    outbound_check,
    redacted_cut,
)
from agentops.models import Event, Gate, Task
from agentops.plumbing import queues
from agentops.plumbing.logs import job_meta
from agentops.states import GateStatus, TaskStatus
from reviews.channels import Audience, Channel, DeliveryRefused, channel_get, channels
from reviews.links import public_link
from reviews.models import Delivery, Notice, NotificationRoute
from reviews.notice_text import notice_record_text
from reviews.services import delivery_attempt_begin, delivery_attempt_record
from reviews.states import DeliveryStatus, NoticeEvent, Role

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

STOP_EVENT = "agentops.task.stopped"


def _conf(name: str) -> Any:
    return settings.AGENTOPS[name]


def notice_link(notice: Notice) -> str:
    """The notice's page, from AGENTOPS_PUBLIC_URL as it is when the message is sent: a notice
    keeps only its path (older rows kept a whole URL: its path is used)."""
    return public_link(urlsplit(notice.link).path)


# -- finding what happened ----------------------------------------------------------------------


def _unnoticed(queryset: Any, event: str, subject: Any) -> Any:
    """`queryset` without the rows whose (event, subject) notice exists already; `subject` is
    an expression over the outer row (OuterRef)."""
    return queryset.annotate(
        noticed=Exists(Notice.objects.filter(event=event, subject=subject))
    ).filter(noticed=False)


def notices_find() -> list[Notice]:
    """Record a Notice for every event nobody has been told about yet."""
    created: list[Notice] = []
    open_gates = Gate.objects.filter(status=GateStatus.OPEN).select_related("task")
    stopped = Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION)
    if not (open_gates.exists() or stopped.exists()):
        return created  # most sweeps: two lookups instead of four searches for the untold
    gate_subject = Concat(Value("gate:"), Cast(OuterRef("pk"), CharField()))
    for gate in _unnoticed(open_gates, NoticeEvent.GATE_OPENED, gate_subject):
        created += _notice_create(NoticeEvent.GATE_OPENED, f"gate:{gate.pk}", gate=gate)
    soon = timezone.now() + timedelta(seconds=_conf("NOTIFY_DUE_SOON_SECONDS"))
    due = open_gates.filter(due_at__lte=soon)
    for gate in _unnoticed(due, NoticeEvent.GATE_DUE_SOON, gate_subject):
        created += _notice_create(NoticeEvent.GATE_DUE_SOON, f"gate:{gate.pk}", gate=gate)
    created += _second_approvals_find(open_gates)
    stop_seq = Subquery(
        Event.objects.filter(task=OuterRef("pk"), action=STOP_EVENT)
        .order_by("-seq")
        .values("seq")[:1]
    )
    stopped = stopped.annotate(stop_seq=stop_seq)
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


def second_approval_subject(gate: Gate) -> str:
    """A gate's second-approval notice, once per proposal: an edit starts the count over, and
    the new first approval tells the second group again."""
    return f"gate:{gate.pk}@{gate.args_digest[:16]}"


def _second_approvals_find(open_gates: Any) -> list[Notice]:
    """Open gates that hold an approval and want another person's (four eyes)."""
    subject = Concat(
        Value("gate:"),
        Cast(OuterRef("pk"), CharField()),
        Value("@"),
        Left(OuterRef("args_digest"), 16),
    )
    waiting = open_gates.exclude(approvals=[])
    created: list[Notice] = []
    for gate in _unnoticed(waiting, NoticeEvent.GATE_SECOND_APPROVAL, subject):
        if approval_kind_of(gate).approvals_of(gate):
            created += _notice_create(
                NoticeEvent.GATE_SECOND_APPROVAL, second_approval_subject(gate), gate=gate
            )
    return created


def _notice_create(
    event: str, subject: str, *, gate: Gate | None = None, task: Task | None = None
) -> list[Notice]:
    """Create the notice and its deliveries in one transaction; [] if another sweep did."""
    text = notice_record_text(event=event, gate=gate, task=task)
    if gate is not None:
        task = gate.task
        link = reverse("reviews:gate", args=[gate.pk])
    else:
        assert task is not None
        link = reverse("reviews:recover", args=[task.pk])
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


def _default_groups(notice: Notice) -> set[str]:
    """Who decides now: the groups a gate waits for (after the first of two approvals, the
    group whose approval is missing), or the operators for a stopped task."""
    if notice.gate is not None:
        return set(approval_kind_of(notice.gate).waiting_for(notice.gate))
    return {Role.OPERATORS}


def _audience(notice: Notice, routes: list[NotificationRoute]) -> Audience:
    """Who hears about `notice`: the people of the routed groups (or of the default groups
    without a route), and the routes themselves. Each channel makes its deliveries from it."""
    groups = {route.group.name for route in routes if route.group is not None}
    if not routes:
        groups = _default_groups(notice)
    people = (
        get_user_model()
        .objects.filter(groups__name__in=groups, is_active=True)
        .select_related("notification_preference")
        .distinct()
    )
    if notice.gate is not None and notice.task.created_by_id:
        # Separation of duties: whoever started the task cannot approve its gates.
        people = people.exclude(pk=notice.task.created_by_id)
    if notice.gate is not None:
        # Who approved already is not asked again (four eyes: someone else must).
        approved = [a.user_id for a in approval_kind_of(notice.gate).approvals_of(notice.gate)]
        people = people.exclude(pk__in=[pk for pk in approved if pk is not None])
    return Audience(people=tuple(people), routes=tuple(routes), now=timezone.now())


def _deliveries_create(notice: Notice) -> None:
    """One delivery per recipient and channel: each registered channel's, from the audience."""
    audience = _audience(notice, _routes(notice))
    Delivery.objects.bulk_create(
        [row for channel in channels() for row in channel.deliveries(notice, audience)]
    )


# -- sending ------------------------------------------------------------------------------------


def _attempt_seconds() -> int:
    """The deadline of one whole attempt (every SMTP exchange, or the webhook request): the
    delivery job's RQ timeout, which ends a receiver that trickles bytes within each socket
    timeout."""
    seconds: float = _conf("NOTIFY_ATTEMPT_TIMEOUT_SECONDS")
    return math.ceil(seconds)


def _abandoned_after() -> timedelta:
    """How long after it started an attempt with no recorded outcome counts as abandoned: its
    deadline, plus the sweeper's grace for the job to record what ended it."""
    return timedelta(seconds=_attempt_seconds() + _conf("SWEEP_GRACE_SECONDS"))


def deliveries_enqueue_due() -> int:
    """Enqueue a job for every pending delivery whose time has come and that has no attempt in
    flight; returns how many."""
    due = Delivery.objects.filter(
        status=DeliveryStatus.PENDING,
        attempt_started_at=None,
        next_attempt_at__lte=timezone.now(),
    ).values_list("pk", "attempts")
    queue = queues.queue(queues.NOTICES)
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
            job_timeout=_attempt_seconds(),
        )
        count += 1
    return count


def deliveries_abandoned_fail() -> int:
    """Count as failed every attempt that was started but recorded no outcome in time (its
    worker was killed or frozen): the attempt was counted when it began, so it weighs on the
    cap, and the delivery waits out its backoff like any other failure. Returns how many."""
    abandoned = list(
        Delivery.objects.filter(
            status=DeliveryStatus.PENDING,
            attempt_started_at__isnull=False,
            next_attempt_at__lte=timezone.now(),
        ).values_list("pk", "attempts", "attempt_started_at")
    )
    for delivery_id, attempt, started in abandoned:
        _attempt_failed(
            delivery_id,
            attempt,
            f"Abandoned: the attempt started at {started:%Y-%m-%d %H:%M:%S %Z} recorded no "
            "outcome (its worker stopped)",
        )
    return len(abandoned)


def notifications_sweep() -> int:
    """The sweeper's hook: record new notices, count abandoned attempts, then enqueue due
    deliveries."""
    notices_find()
    deliveries_abandoned_fail()
    return deliveries_enqueue_due()


def delivery_send(*, delivery_id: int) -> str:
    """Send one delivery (the RQ job), with no transaction open and no row lock held while the
    network is waited on:

    1. claim and count the attempt, committed (`delivery_attempt_begin`): a second job finds it
       in flight and sends nothing;
    2. send, within the channel's deadline (`EMAIL_TIMEOUT`, `WEBHOOK_TIMEOUT_SECONDS`) and the
       job's (`NOTIFY_ATTEMPT_TIMEOUT_SECONDS`);
    3. record the outcome: sent, or pending again after a backoff, or failed at the cap.

    At least once: a worker that dies after sending and before step 3 leaves the attempt to be
    counted as abandoned and tried again, and the receiver can tell by `X-Agentops-Delivery`."""
    attempt = delivery_attempt_begin(delivery_id=delivery_id, window=_abandoned_after())
    if attempt is None:
        return "nothing to send"
    delivery = Delivery.objects.select_related(
        "notice__task", "notice__gate", "user", "endpoint"
    ).get(pk=delivery_id)
    try:
        channel = _channel(delivery)
    except DeliveryRefused as error:
        return _attempt_failed(delivery_id, attempt, _error_text(error))
    # What counts as a failed attempt: the network's errors, a refusal, and the channel's own.
    failures: tuple[type[Exception], ...] = (
        httpx.HTTPError,
        OSError,
        DeliveryRefused,
        *channel.failures,
    )
    try:
        _send(delivery, channel)
    except failures as error:
        return _attempt_failed(delivery_id, attempt, _error_text(error))
    except Exception as error:
        # Anything else that ends the attempt (the job's timeout, a backend's own error) is
        # recorded with its error before it propagates, so the attempt is never left unrecorded.
        _attempt_failed(delivery_id, attempt, _error_text(error))
        raise
    delivery_attempt_record(
        delivery_id=delivery_id,
        attempt=attempt,
        target=DeliveryStatus.SENT,
        sent_at=timezone.now(),
        last_error="",
    )
    return "sent"


def _error_text(error: BaseException) -> str:
    return f"{error.__class__.__name__}: {error}"


def _attempt_failed(delivery_id: int, attempt: int, error: str) -> str:
    """Record attempt `attempt` as failed: pending again after a backoff that doubles per attempt,
    or failed with its error once `NOTIFY_MAX_ATTEMPTS` attempts were made. The error is a
    remote's words: secrets in it are redacted before it is stored."""
    last_error = redacted_cut(error, 1000)
    if attempt >= _conf("NOTIFY_MAX_ATTEMPTS"):
        delivery_attempt_record(
            delivery_id=delivery_id,
            attempt=attempt,
            target=DeliveryStatus.FAILED,
            last_error=last_error,
        )
    else:
        backoff = _conf("NOTIFY_BACKOFF_SECONDS") * 2 ** (attempt - 1)
        delivery_attempt_record(
            delivery_id=delivery_id,
            attempt=attempt,
            target=DeliveryStatus.PENDING,
            last_error=last_error,
            next_attempt_at=timezone.now() + timedelta(seconds=backoff),
        )
    logger.warning("notification %s attempt %s failed: %s", delivery_id, attempt, error)
    return f"attempt {attempt} failed"


def _channel(delivery: Delivery) -> Channel:
    """The channel that sends `delivery`; one no longer registered refuses it (it is retried,
    then fails at the cap, with that error)."""
    try:
        return channel_get(delivery.channel)
    except LookupError as exc:
        raise DeliveryRefused(str(exc)) from None


def _send(delivery: Delivery, channel: Channel) -> None:
    outbound_check(f"notification delivery {delivery.pk}")
    channel.deliver(delivery, notice_link(delivery.notice))
