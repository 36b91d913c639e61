"""The webhook channel: a notice to each active endpoint its routes name, as a signed JSON POST
(or a Slack-compatible `text` body), with no transaction open and within
`WEBHOOK_TIMEOUT_SECONDS`. It takes no decisions: a receiver acts through the API.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agentops.engine import outbound_tls
from reviews.channels import Audience, Channel, DeliveryRefused
from reviews.models import Delivery, WebhookEndpoint
from reviews.notice_text import notice_text
from reviews.slack import mrkdwn_escape
from reviews.states import DeliveryChannel, WebhookFormat

if TYPE_CHECKING:
    from reviews.models import Notice


class WebhookChannel(Channel):
    name = DeliveryChannel.WEBHOOK.value
    label = gettext_lazy("Webhook")

    def deliveries(self, notice: Notice, audience: Audience) -> list[Delivery]:
        return [
            Delivery(
                notice=notice, channel=self.name, endpoint=endpoint, next_attempt_at=audience.now
            )
            for endpoint in sorted(_endpoints(audience), key=lambda e: e.pk)
        ]

    def deliver(self, delivery: Delivery, link: str) -> None:
        endpoint = delivery.endpoint
        assert endpoint is not None, "a webhook delivery has an endpoint"
        body = json.dumps(webhook_body(delivery, link), sort_keys=True).encode()
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
                "X-Agentops-Signature": (
                    f"sha256={webhook_signature(endpoint.secret, timestamp, body)}"
                ),
            },
            timeout=settings.AGENTOPS["WEBHOOK_TIMEOUT_SECONDS"],
            follow_redirects=False,
            verify=outbound_tls(),
        )
        if not 200 <= response.status_code < 300:
            raise DeliveryRefused(f"HTTP {response.status_code}")


def _endpoints(audience: Audience) -> set[WebhookEndpoint]:
    """The active endpoints the notice's routes name."""
    return {route.endpoint for route in audience.routes if route.endpoint and route.endpoint.active}


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Hex HMAC-SHA256 of `<timestamp>.<body>`: a receiver recomputes it with the shared
    secret and rejects old timestamps (replays)."""
    message = timestamp.encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def webhook_body(delivery: Delivery, link: str) -> dict[str, Any]:
    """The JSON a webhook delivery posts: the event, the task, the gate, the text and `link`.
    The text is written when it is sent, in the site's language (`settings.LANGUAGE_CODE`: a
    receiver is no one person); the keys, the event and the statuses are codes and stay so."""
    with translation.override(settings.LANGUAGE_CODE):
        return _webhook_body(delivery, link)


def _webhook_body(delivery: Delivery, link: str) -> dict[str, Any]:
    notice = delivery.notice
    assert delivery.endpoint is not None, "a webhook delivery has an endpoint"
    text = notice_text(notice)
    if delivery.endpoint.body_format == WebhookFormat.SLACK:
        return {
            "text": _("%(text)s <%(link)s|Open in agentops>")
            % {"text": mrkdwn_escape(text), "link": link}
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
        "text": text,
        "link": link,
    }
