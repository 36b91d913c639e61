"""Hostile text renders as text on every review page.

Each payload of the corpus is placed where untrusted text enters the product: a task goal, the
model's reply (a scripted agent registered here), tool arguments and results (the eligibility
service echoes its `reason`), an error string (the orders service quotes an unknown order id),
gate feedback and an audit note. Then the inbox, the gate panel, the recovery panel, the audit
queue, the decision log and the task pages are parsed with html.parser: no script but the vendored
htmx, no event-handler attribute, no `hx-*` attribute carrying the payload, no javascript: URL,
and the payload itself present as inert text.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from django.templatetags.static import static
from django.urls import reverse

from agentops.engine import task_create
from agentops.engine.model import ModelRequest
from agentops.engine.registry import Agent, PlanStep, register_agent
from agentops.models import AuditItem, Gate, Task
from agentops.states import GateStatus, TaskStatus
from reviews.services import audit_item_review, gate_reject
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import client_for, open_gate

pytestmark = pytest.mark.django_db

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '" hx-get="/x" hx-trigger="load',
    "{{7*7}}",
    "javascript:alert(1)",
]
# Pieces of the payloads that must never end up in an hx-* attribute.
FRAGMENTS = ("/x", "alert(1)", "7*7", "javascript:")
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "hx-get", "hx-post"}


def hostile_script(request: ModelRequest) -> dict[str, Any]:
    payload = request.task_input["payload"]
    calls = [
        ("email_customer", {"to": "ada@example.com", "subject": payload, "body": payload}),
        ("check_eligibility", {"order_id": "A1001", "reason": payload}),
        ("issue_refund", {"order_id": "B2002", "amount": 108.0, "currency": payload}),
    ]
    name, arguments = calls[request.step]
    return {
        "text": payload,
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": 0.9,
    }


def lost_order_script(request: ModelRequest) -> dict[str, Any]:
    payload = request.task_input["payload"]
    return {
        "text": payload,
        "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": payload}}],
        "confidence": 0.9,
    }


register_agent(
    Agent(
        name="test_hostile",
        system_prompt="Write what you are given.",
        tools=["email_customer", "check_eligibility", "issue_refund"],
        plan=[
            PlanStep("Email", "email_customer"),
            PlanStep("Check", "check_eligibility"),
            PlanStep("Refund", "issue_refund"),
        ],
        script=hostile_script,
        hidden=True,
    )
)
register_agent(
    Agent(
        name="test_lost_order",
        system_prompt="Look the order up.",
        tools=["lookup_order"],
        plan=[PlanStep("Look up", "lookup_order")],
        script=lost_order_script,
        hidden=True,
    )
)


class Markup(HTMLParser):
    """The start tags (with attributes) and the text of a page."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def live_markup(html: str, payload: str) -> list[str]:
    """What in `html` could run or fetch: an empty list when the page is inert."""
    markup = Markup(html)
    htmx = static("vendor/htmx-2.0.11.min.js")
    found = []
    for tag, attrs in markup.tags:
        values = dict(attrs)
        if tag == "script" and values.get("src") != htmx:
            found.append(f"<script {attrs}>")
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                found.append(f"<{tag} {name}={value!r}>")
            if name.startswith(("hx-", "data-hx-")) and (
                payload in value or any(piece in value for piece in FRAGMENTS)
            ):
                found.append(f"<{tag} {name}={value!r}>")
            if name in URL_ATTRIBUTES and value.strip().lower().startswith("javascript:"):
                found.append(f"<{tag} {name}={value!r}>")
    scripts = [tag for tag, _ in markup.tags if tag == "script"]
    if len(scripts) > 1:
        found.append(f"{len(scripts)} script tags")
    return found


def shown_as_text(html: str, payload: str) -> bool:
    markup = Markup(html)
    text = "".join(markup.text)
    attributes = [value or "" for _, attrs in markup.tags for _, value in attrs]
    return payload in text or any(payload in value for value in attributes)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_text_is_inert_on_every_review_page(
    payload, sim, redis_clean, operator, auditor, starter
):
    gated = run_until_parked_or_done(
        task_create(
            agent="test_hostile", goal=payload, input={"payload": payload}, created_by=starter
        )
    )
    assert gated.status == TaskStatus.AWAITING_APPROVAL
    first_gate = open_gate(gated)
    gate_reject(
        gate_id=first_gate.pk, actor=operator, seen_digest=first_gate.args_digest, feedback=payload
    )
    gated = run_until_parked_or_done(gated)
    second_gate = open_gate(gated)
    stopped = run_until_parked_or_done(
        task_create(
            agent="test_lost_order", goal=payload, input={"payload": payload}, created_by=starter
        )
    )
    assert stopped.status == TaskStatus.NEEDS_ATTENTION
    assert payload in stopped.failure["message"]
    item = AuditItem.objects.get(task=gated, tool="email_customer")
    audit_item_review(item_id=item.pk, actor=auditor, verdict="flagged", note=payload)
    assert Gate.objects.get(pk=first_gate.pk).status == GateStatus.REJECTED
    assert payload in str(Task.objects.get(pk=gated.pk).steps.get(ordinal=1).output)

    pages = {
        "inbox": (operator, reverse("reviews:inbox")),
        "inbox rows": (operator, reverse("reviews:inbox")),
        "rejected gate": (operator, reverse("reviews:gate", args=[first_gate.pk])),
        "open gate": (operator, reverse("reviews:gate", args=[second_gate.pk])),
        "recovery panel": (operator, reverse("reviews:recover", args=[stopped.pk])),
        "audit queue": (auditor, reverse("reviews:audit")),
        "decision log": (auditor, reverse("reviews:decisions")),
        "gated task page": (operator, reverse("agentops:task_detail", args=[gated.pk])),
        "stopped task page": (operator, reverse("agentops:task_detail", args=[stopped.pk])),
    }
    # One signed-in client per reader (a login per page read the same pages at more cost).
    clients = {user: client_for(user) for user in (operator, auditor)}
    for name, (user, url) in pages.items():
        headers = {"HTTP_HX_REQUEST": "true"} if name == "inbox rows" else {}
        response = clients[user].get(url, **headers)
        html = response.content.decode()

        assert response.status_code == 200, name
        assert live_markup(html, payload) == [], name
        assert shown_as_text(html, payload), f"{name} does not show the payload"


def test_the_checker_finds_live_markup():
    page = (
        '<script src="/static/vendor/htmx-2.0.11.min.js"></script>'
        '<img src=x onerror=alert(1)><a hx-get="/x" hx-trigger="load">x</a>'
        '<a href="javascript:alert(1)">y</a><script>alert(1)</script>'
    )

    found = live_markup(page, '" hx-get="/x" hx-trigger="load')

    assert len(found) == 5
    assert live_markup("<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>", "<script>") == []
    assert shown_as_text(
        "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>", "<script>alert(1)</script>"
    )
