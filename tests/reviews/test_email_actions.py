"""Acting from the email: a gate email carries an Approve and a Reject link signed for its
recipient; a link opens a confirmation page after sign-in (a GET never decides) and the POST
decides through the same command as the panel, logged with channel `email`. A link works once,
until it expires, for its recipient only; a tampered link, a used one, an expired one, someone
else's and one for a gate already decided decide nothing. Untrusted text in the email cannot fake
a link line or markup.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core import mail, signing
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from agentops.models import Gate, Task
from agentops.states import GateStatus
from reviews.email_actions import (
    ActionLinks,
    email_action_link,
    notice_email_html,
    notice_email_text,
)
from reviews.models import Decision, Delivery, EmailActionUse, Notice
from reviews.notifications import delivery_send, notices_find
from reviews.services import gate_approve
from reviews.states import VIA_BROWSER, DeliveryStatus, NoticeEvent
from tests.reviews.builders import asked_question, client_for, gated_refund, open_gate

pytestmark = pytest.mark.django_db

BASE = "https://agentops.example.com"


@pytest.fixture
def mailbox(settings: Any) -> list[Any]:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.AGENTOPS = {**settings.AGENTOPS, "PUBLIC_URL": BASE}
    mail.outbox = []
    return mail.outbox


def emailed_gate(*users: Any, starter: Any = None) -> Gate:
    """A gated refund whose gate email went to `users` (each given an address)."""
    for user in users:
        user.email = f"{user.username}@example.com"
        user.save(update_fields=["email"])
    gate = open_gate(gated_refund(created_by=starter))
    notices_find()
    for pk in Delivery.objects.filter(status=DeliveryStatus.PENDING).values_list("pk", flat=True):
        assert delivery_send(delivery_id=pk) == "sent"
    return gate


def links_of(message: Any) -> dict[str, str]:
    """The link lines of an email's text ("Approve: <url>") as paths, by their label."""
    found = re.findall(r"^(Open it|Approve|Reject): (\S+)$", message.body, re.MULTILINE)
    return {label: urlsplit(url).path for label, url in found}


def mail_to(mailbox: list[Any], user: Any) -> Any:
    (message,) = [m for m in mailbox if m.to == [user.email]]
    return message


def title_of(page: Any) -> str:
    """The page's title without the site's name."""
    found = re.search(r"<title>(.*?) · agentops</title>", page.content.decode(), re.DOTALL)
    assert found, "the page has a title"
    return found.group(1).strip()


def confirm(user: Any, path: str, **data: str) -> Any:
    """Open the link's page as `user`, then post its form with the page's CSRF token."""
    browser = client_for(user, enforce_csrf_checks=True)
    page = browser.get(path)
    assert page.status_code == 200, page.content.decode()
    return browser.post(path, {"csrfmiddlewaretoken": page.context["csrf_token"], **data})


def email_decisions(gate: Gate) -> list[tuple[str, str, str]]:
    return list(
        Decision.objects.filter(task_id_ref=gate.task_id, action__startswith="reviews.gate.")
        .order_by("id")
        .values_list("action", "actor_label", "channel")
    )


def test_a_gate_email_carries_action_links_that_confirm_before_they_decide(
    sim, redis_clean, mailbox, operator, starter
):
    gate = emailed_gate(operator, starter=starter)
    message = mail_to(mailbox, operator)
    links = links_of(message)
    html = message.alternatives[0][0]

    assert set(links) == {"Open it", "Approve", "Reject"}
    assert f'href="{BASE}{links["Approve"]}"' in html and f'href="{BASE}{links["Reject"]}"' in html
    anonymous = Client().get(links["Approve"])
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    page = client_for(operator).get(links["Approve"])
    assert page.status_code == 200 and gate.tool in page.content.decode()
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN  # a GET decides nothing
    assert client_for(operator, enforce_csrf_checks=True).post(links["Approve"]).status_code == 403

    response = confirm(operator, links["Approve"])

    assert response.status_code == 302 and response["Location"] == f"/review/gates/{gate.pk}"
    gate.refresh_from_db()
    assert gate.status == GateStatus.APPROVED and gate.decided_by == operator
    assert email_decisions(gate) == [("reviews.gate.approved", "olga", "email")]
    assert EmailActionUse.objects.get().user == operator


def test_a_link_works_once(sim, redis_clean, mailbox, operator):
    gate = emailed_gate(operator)
    links = links_of(mail_to(mailbox, operator))
    browser = client_for(operator, enforce_csrf_checks=True)
    token = browser.get(links["Approve"]).context["csrf_token"]

    first = browser.post(links["Approve"], {"csrfmiddlewaretoken": token})
    again = browser.post(links["Approve"], {"csrfmiddlewaretoken": token})
    reopened = browser.get(links["Approve"])

    assert first.status_code == 302
    assert again.status_code == 410 and "used already" in again.content.decode()
    assert reopened.status_code == 410
    # Refused, and still named for what it asked.
    assert title_of(again) == title_of(reopened) == "Approve from the email"
    assert email_decisions(gate) == [("reviews.gate.approved", "olga", "email")]


def test_the_other_link_of_a_decided_gate_says_who_decided(sim, redis_clean, mailbox, operator):
    gate = emailed_gate(operator)
    links = links_of(mail_to(mailbox, operator))
    confirm(operator, links["Approve"])

    page = client_for(operator).get(links["Reject"])

    assert page.status_code == 409
    assert 'already <strong>approved</strong>: decided by <strong translate="no">olga</strong>' in (
        page.content.decode()
    )
    assert 'id="confirm-head"' not in page.content.decode()  # no form to confirm
    assert email_decisions(gate) == [("reviews.gate.approved", "olga", "email")]


def test_a_link_to_a_gate_someone_else_decided_decides_nothing(
    sim, redis_clean, mailbox, operator, operator2
):
    gate = emailed_gate(operator, operator2)
    links = links_of(mail_to(mailbox, operator))
    browser = client_for(operator, enforce_csrf_checks=True)
    token = browser.get(links["Approve"]).context["csrf_token"]
    gate_approve(gate_id=gate.pk, actor=operator2, seen_digest=gate.args_digest, via=VIA_BROWSER)

    page = browser.get(links["Approve"])
    posted = browser.post(links["Approve"], {"csrfmiddlewaretoken": token})

    assert (
        page.status_code == 409
        and 'decided by <strong translate="no">otto</strong>' in page.content.decode()
    )
    assert posted.status_code == 409
    assert email_decisions(gate) == [("reviews.gate.approved", "otto", "browser")]
    assert not EmailActionUse.objects.exists()


def test_reject_asks_why_and_a_refused_try_leaves_the_link_usable(
    sim, redis_clean, mailbox, operator
):
    gate = emailed_gate(operator)
    path = links_of(mail_to(mailbox, operator))["Reject"]

    empty = confirm(operator, path, reason="  ")
    done = confirm(operator, path, reason="Wrong order: <b>B2001</b>")

    assert empty.status_code == 400 and "say why" in empty.content.decode()
    assert done.status_code == 302
    gate.refresh_from_db()
    assert gate.status == GateStatus.REJECTED and gate.feedback == "Wrong order: <b>B2001</b>"
    assert email_decisions(gate) == [("reviews.gate.rejected", "olga", "email")]


def test_someone_elses_link_decides_nothing(sim, redis_clean, mailbox, operator, operator2):
    gate = emailed_gate(operator, operator2)
    path = links_of(mail_to(mailbox, operator))["Approve"]
    browser = client_for(operator2, enforce_csrf_checks=True)

    page = browser.get(path)
    token = client_for(operator2).get("/review/account").context["csrf_token"]
    posted = browser.post(path, {"csrfmiddlewaretoken": token})

    assert page.status_code == 403 and "sent to someone else" in page.content.decode()
    assert posted.status_code == 403
    assert title_of(page) == "Approve from the email"
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert email_decisions(gate) == []


def test_a_recipient_whose_role_was_removed_sees_nothing_of_the_gate_and_decides_nothing(
    sim, redis_clean, mailbox, operator
):
    gate = emailed_gate(operator)
    links = links_of(mail_to(mailbox, operator))
    operator.groups.clear()  # the role is removed after the email was sent
    browser = client_for(operator, enforce_csrf_checks=True)
    token = browser.get("/review/account").context["csrf_token"]

    pages = [browser.get(links[label]) for label in ("Approve", "Reject")]
    posted = browser.post(links["Approve"], {"csrfmiddlewaretoken": token, "reason": "x"})
    inbox = browser.get("/review/")

    for response in (*pages, posted):
        assert response.status_code == inbox.status_code == 403
        page = response.content.decode()
        assert "Refund order B2002" not in page and gate.tool not in page
        assert "B2002" not in page
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert email_decisions(gate) == [] and not EmailActionUse.objects.exists()


def test_a_recipient_who_is_now_an_auditor_reads_the_gate_but_decides_nothing(
    sim, redis_clean, mailbox, operator, groups
):
    gate = emailed_gate(operator)
    path = links_of(mail_to(mailbox, operator))["Approve"]
    operator.groups.set([groups["auditors"]])
    browser = client_for(operator, enforce_csrf_checks=True)
    token = browser.get("/review/account").context["csrf_token"]

    page = browser.get(path)
    posted = browser.post(path, {"csrfmiddlewaretoken": token})

    # As in the inbox: an auditor may read the gate, not decide it.
    assert page.status_code == 403 and gate.tool in page.content.decode()
    assert "only members of" in page.content.decode()
    assert 'id="confirm-head"' not in page.content.decode()  # no form to confirm
    assert posted.status_code == 403
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert email_decisions(gate) == [] and not EmailActionUse.objects.exists()


def test_the_starter_cannot_approve_by_a_link_either(sim, redis_clean, mailbox, operator, starter):
    gate = emailed_gate(operator, starter, starter=starter)
    assert [m.to for m in mailbox] == [["olga@example.com"]]  # the starter is not asked
    path = urlsplit(email_action_link(gate=gate, user=starter, action="approve")).path
    browser = client_for(starter, enforce_csrf_checks=True)

    page = browser.get(path)
    token = browser.get("/review/account").context["csrf_token"]
    posted = browser.post(path, {"csrfmiddlewaretoken": token})

    assert page.status_code == 403 and "someone else must decide" in page.content.decode()
    assert posted.status_code == 403
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_an_expired_link_decides_nothing(sim, redis_clean, mailbox, operator, monkeypatch):
    gate = open_gate(gated_refund())
    a_day_ago = time.time() - 86_401
    with monkeypatch.context() as past:
        past.setattr(signing.time, "time", lambda: a_day_ago)
        path = urlsplit(email_action_link(gate=gate, user=operator, action="reject")).path
    browser = client_for(operator, enforce_csrf_checks=True)
    token = browser.get("/review/account").context["csrf_token"]

    page = browser.get(path)
    posted = browser.post(path, {"csrfmiddlewaretoken": token})

    assert page.status_code == 410 and "expired" in page.content.decode()
    assert posted.status_code == 410
    assert title_of(page) == "Reject from the email"
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


@pytest.mark.parametrize("where", ["payload", "signature", "salt"])
def test_a_tampered_link_decides_nothing(sim, redis_clean, mailbox, operator, operator2, where):
    gate = open_gate(gated_refund())
    path = urlsplit(email_action_link(gate=gate, user=operator2, action="approve")).path
    token = path.rsplit("/", 1)[1]
    if where == "payload":  # claim the link is olga's, keep otto's signature
        forged = signing.TimestampSigner(salt="reviews.email_action").sign_object(
            {"g": gate.pk, "u": operator.pk, "a": "approve", "d": gate.args_digest}
        )
        token = forged.split(":", 1)[0] + ":" + token.split(":", 1)[1]
    elif where == "signature":
        token = token[:-1] + ("A" if token[-1] != "A" else "B")
    else:  # a valid signature of another kind of link (Slack's account link)
        token = signing.TimestampSigner(salt="reviews.slack.link").sign_object(
            {"g": gate.pk, "u": operator.pk, "a": "approve", "d": gate.args_digest}
        )
    browser = client_for(operator, enforce_csrf_checks=True)
    csrf = browser.get("/review/account").context["csrf_token"]

    page = browser.get(f"/review/email-actions/{token}")
    posted = browser.post(f"/review/email-actions/{token}", {"csrfmiddlewaretoken": csrf})

    assert page.status_code == 400 and "not valid" in page.content.decode()
    assert posted.status_code == 400
    assert title_of(page) == "Email link"  # nothing of a tampered link is believed
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


# -- the email's text and markup ------------------------------------------------------------------

LINKS = ActionLinks(
    approve=f"{BASE}/review/email-actions/approve-token",
    reject=f"{BASE}/review/email-actions/reject-token",
    expires_at=datetime(2026, 12, 2, tzinfo=UTC),
)
OPEN = f"{BASE}/review/gates/12"


class Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.hrefs += [value or "" for name, value in attrs if name == "href"]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@settings(max_examples=100, deadline=None)
@given(goal=st.text(max_size=300))
def test_untrusted_text_cannot_fake_a_link_in_the_email(goal):
    text = f"Task 7 (refund): 'issue_refund' waits for approval. Goal: {goal}"
    body = notice_email_text(text=text, link=OPEN, actions=LINKS)
    task = Task(pk=7, agent="refund", goal=goal, failure={"kind": "forbidden"})
    html = notice_email_html(
        notice=Notice(event=NoticeEvent.TASK_STOPPED, task=task), link=OPEN, actions=LINKS
    )
    markup = Markup()
    markup.feed(html)
    markup.close()

    labelled = [line for line in body.splitlines() if re.match(r"(Open it|Approve|Reject): ", line)]
    assert labelled == [f"Open it: {OPEN}", f"Approve: {LINKS.approve}", f"Reject: {LINKS.reject}"]
    assert markup.hrefs == [OPEN, LINKS.approve, LINKS.reject]
    # The sentence's and the goal's values each in an element kept as written, nothing more.
    assert markup.tags == [
        "html",
        "head",
        "meta",
        "title",
        "body",
        "p",
        "span",
        "span",
        "p",
        "span",
        "p",
        "a",
        "span",
        "p",
        "a",
        "a",
        "p",
    ]
    assert " ".join(goal.split()) in " ".join("".join(markup.text).split())


def test_an_agents_question_is_emailed_without_action_links(
    sim, redis_clean, mailbox, operator, starter
):
    operator.email = "olga@example.com"
    operator.save(update_fields=["email"])
    asked_question(created_by=starter)
    notices_find()
    for pk in Delivery.objects.filter(status=DeliveryStatus.PENDING).values_list("pk", flat=True):
        assert delivery_send(delivery_id=pk) == "sent"

    assert set(links_of(mail_to(mailbox, operator))) == {"Open it"}
