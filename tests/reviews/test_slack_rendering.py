"""What goes to Slack and what is accepted from it, as properties: untrusted text (a goal, tool
arguments, a reason, a name) rendered into Block Kit can neither form a link nor mention anyone
and always fits Slack's limits; the request signature agrees with slack-sdk's reference
`SignatureVerifier` for any secret, body and time; and every Web API call keeps its deadline and
is never made inside a transaction.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_sdk.signature import Clock, SignatureVerifier

from agentops.engine import QUESTION
from agentops.engine.outbound import OutboundInTransaction
from agentops.models import Gate, Task
from agentops.states import GateStatus
from reviews.slack import (
    OPEN,
    gate_message,
    gate_outcome_message,
    mrkdwn_escape,
    mrkdwn_fit,
    reject_modal,
)
from reviews.slack_interactions import signature_refusal, slack_signature
from reviews.slack_web import SlackError, slack_call
from tests import slack_api
from tests.slack_api import blocks_check

# Any text at all, control characters and astral planes included, and text made of Slack's
# control characters and the pieces of links and mentions.
untrusted = st.text(max_size=400) | st.lists(
    st.sampled_from(["<", ">", "&", "|", "!", "@", "channel", "here", "http://x", "amp;", "`"]),
    max_size=60,
).map("".join)
LIVE_AMPERSAND = re.compile(r"&(?!amp;|lt;|gt;)")
OUR_MENTION = re.compile(r"<@U[A-Z0-9]+>")


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def a_gate(goal: str, arguments: Any, *, status: str = GateStatus.OPEN, **decided: Any) -> Gate:
    """A gate and its task in memory (Block Kit is rendered from the rows, not the engine)."""
    task = Task(pk=7, agent="refund", goal=goal)
    return Gate(
        pk=12,
        task=task,
        tool="issue_refund",
        arguments=arguments,
        args_digest="a" * 64,
        rule="refunds over 100",
        amount=Decimal("108.00"),
        due_at=datetime(2026, 12, 1, 22, 0, tzinfo=UTC),
        status=status,
        decided_at=datetime(2026, 12, 1, 21, 30, tzinfo=UTC),
        **decided,
    )


def mrkdwn_texts(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if value.get("type") == "mrkdwn":
            yield value["text"]
        for inner in value.values():
            yield from mrkdwn_texts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from mrkdwn_texts(inner)


def assert_inert(message: dict[str, Any]) -> None:
    for text in [message.get("text", ""), *mrkdwn_texts(message["blocks"])]:
        bare = OUR_MENTION.sub("", text)
        assert "<" not in bare and ">" not in bare, text
        assert not LIVE_AMPERSAND.search(text), text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(goal=untrusted, key=untrusted, value=untrusted, reason=untrusted, name=untrusted)
def test_untrusted_text_in_block_kit_forms_no_link_or_mention_and_fits(
    goal, key, value, reason, name
):
    arguments = {"order_id": value, key: [value, {"note": goal}]}
    approver = User(username=name[:150] or "x")
    messages = [
        gate_message(a_gate(goal, arguments)),
        gate_outcome_message(
            a_gate(
                goal, arguments, status=GateStatus.REJECTED, feedback=reason, decided_by=approver
            ),
            late_slack_user="U0LATE",
        ),
        gate_outcome_message(
            a_gate(goal, arguments, status=GateStatus.APPROVED, decided_by=approver)
        ),
    ]

    for message in messages:
        assert_inert(message)
        blocks_check(message["blocks"], limit=50, surface="message")
    modal = reject_modal(a_gate(goal, arguments), digest="0" * 64, channel="C0X", ts="1.2")
    blocks_check(modal["blocks"], limit=100, surface="modal")
    assert_inert(modal)
    shown = "\n".join(mrkdwn_texts(messages[1]["blocks"]))
    if len(mrkdwn_escape(reason)) < 2500:
        assert mrkdwn_escape(reason) in shown
    if len(mrkdwn_escape(goal)) < 2500:
        assert mrkdwn_escape(goal) in "\n".join(mrkdwn_texts(messages[0]["blocks"]))


@given(text=untrusted, limit=st.integers(min_value=2, max_value=300))
def test_a_cut_never_splits_an_escape_and_keeps_a_prefix(text, limit):
    fitted = mrkdwn_fit(text, limit)

    assert len(fitted) <= limit
    assert not LIVE_AMPERSAND.search(fitted)
    kept = fitted.removesuffix("…") if fitted != mrkdwn_escape(text) else fitted
    assert text.startswith(unescape(kept))


class FixedClock(Clock):
    def __init__(self, now: float) -> None:
        self.moment = now

    def now(self) -> float:
        return self.moment


@settings(max_examples=200)
@given(
    secret=st.text(min_size=1, max_size=40).filter(str.strip),
    # Slack's bodies are form-encoded UTF-8.
    body=st.text(max_size=300).map(str.encode),
    stamp=st.integers(min_value=1_000_000_000, max_value=2_000_000_000),
    skew=st.integers(min_value=-400, max_value=400),
    tamper=st.booleans(),
)
def test_the_signature_check_agrees_with_slack_sdk(secret, body, stamp, skew, tamper):
    reference = SignatureVerifier(secret, clock=FixedClock(stamp + skew))
    signature = reference.generate_signature(timestamp=str(stamp), body=body)
    assert signature == slack_signature(secret, str(stamp), body)
    if tamper:
        signature = signature[:-1] + ("0" if signature[-1] != "0" else "1")

    ours = signature_refusal(
        secret=secret, body=body, timestamp=str(stamp), signature=signature, now=stamp + skew
    )

    assert (ours is None) == reference.is_valid(
        body=body, timestamp=str(stamp), signature=signature
    )


@pytest.fixture
def slow_slack(settings: Any) -> Iterator[slack_api.StandInSlack]:
    stand_in, server = slack_api.serve()
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "SLACK_BOT_TOKEN": slack_api.BOT_TOKEN,
        "SLACK_API_URL": stand_in.url,
        "SLACK_TIMEOUT_SECONDS": 0.5,
    }
    yield stand_in
    server.shutdown()
    server.server_close()


def test_a_web_api_call_gives_up_at_its_deadline(slow_slack):
    slow_slack.delay = 5.0
    started = time.monotonic()

    with pytest.raises(httpx.TimeoutException):
        slack_call("chat.postMessage", {"channel": slack_api.CHANNEL, "text": "hello"})

    # Before the answer would come (a loaded machine adds its own delay to the 0.5 s).
    assert time.monotonic() - started < slow_slack.delay


def test_an_outage_or_a_refusal_is_an_error_to_retry(slow_slack, settings):
    slow_slack.outage_status = 503
    with pytest.raises(httpx.HTTPStatusError):
        slack_call("chat.postMessage", {"channel": slack_api.CHANNEL, "text": "hello"})
    slow_slack.outage_status = 0
    settings.AGENTOPS = {**settings.AGENTOPS, "SLACK_BOT_TOKEN": "xoxb-wrong"}
    with pytest.raises(SlackError, match="invalid_auth"):
        slack_call("chat.postMessage", {"channel": slack_api.CHANNEL, "text": "hello"})


@pytest.mark.django_db
def test_no_web_api_call_is_made_inside_a_transaction(slow_slack):
    with transaction.atomic(), pytest.raises(OutboundInTransaction):
        slack_call("chat.postMessage", {"channel": slack_api.CHANNEL, "text": "hello"})

    assert slow_slack.calls == []


def test_an_agents_question_is_answered_on_its_page_not_from_a_button():
    gate = a_gate("Refund the damaged item", {"question": "How much?", "options": ["all", "half"]})
    gate.approval_kind = QUESTION

    (actions,) = [b for b in gate_message(gate)["blocks"] if b["type"] == "actions"]

    assert [e["action_id"] for e in actions["elements"]] == [OPEN]
    assert actions["elements"][0]["url"].endswith(f"/review/gates/{gate.pk}")


def test_a_decided_gates_section_fits_with_the_longest_reason_and_names():
    gate = a_gate("g", {}, status=GateStatus.REJECTED, feedback="&" * 5000)
    gate.decided_by = User(username="u" * 150)

    message = gate_outcome_message(gate, late_slack_user="U" + "9" * 19)

    sections = [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]
    assert max(len(text) for text in sections) <= 3000
