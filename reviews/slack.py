"""Slack, the outbound half: gate notices as Block Kit messages with Approve and Reject, the
Slack Web API calls that post and update them, and the job that shows a decision's outcome on its
message. The inbound half (signed button clicks) is `reviews.slack_interactions`.

Every Web API call goes through `reviews.slack_web.slack_call` (no transaction open, a
deadline). The posts of notices are deliveries (retried with backoff like email and webhooks,
`reviews.notifications`). A posted gate message is kept
(`SlackMessage`) and follows its gate: once the gate is decided (from Slack, the product, the API
or its timeout), the sweep finds the message stale and a job (`slack_message_update`, the
message's id only) renders it from the gate as it is then and sends `chat.update`; a click
enqueues that job at once. Each attempt is claimed before it is sent and recorded after, retried
with backoff up to the notification attempt cap, so a retried or duplicated update shows the same
truth.

Channel messages are written in the site's language (`settings.LANGUAGE_CODE`): a channel has no
one reader whose choice to follow. A modal shown to one person is written in theirs
(`reviews.slack_interactions`). Untrusted text (the goal, tool arguments, reasons, names) is
escaped for Slack's mrkdwn (`&`, `<`, `>`) before it goes into a message, so it can neither form a
link nor mention anyone, and is cut to Block Kit's limits without splitting an escape.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext

from agentops.engine import Choice, job_waiting, redacted
from agentops.models import Gate
from agentops.plumbing import queues
from agentops.plumbing.logs import job_meta
from agentops.states import GateStatus
from reviews.channels import channel_get
from reviews.links import public_link
from reviews.models import SlackMessage
from reviews.notice_text import moment, notice_text
from reviews.services.slack import (
    slack_message_attempt_begin,
    slack_message_attempt_record,
    slack_message_mark,
    slack_message_record,
    slack_messages_stale,
)
from reviews.slack_web import SlackError, slack_call, slack_conf, slack_configured
from reviews.states import DeliveryChannel, NoticeEvent

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    from reviews.models import Delivery, Notice

logger = logging.getLogger(__name__)

APPROVE = "gate_approve"
REJECT = "gate_reject"
OPEN = "gate_open"
REJECT_VIEW = "gate_reject"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"

# Block Kit's limits (https://api.slack.com/reference/block-kit/blocks).
SECTION_TEXT_MAX = 3000
HEADER_TEXT_MAX = 150
FALLBACK_TEXT_MAX = 3000
MODAL_TITLE_MAX = 24
REASON_MAX = 3000


# -- text -----------------------------------------------------------------------------------------


def mrkdwn_escape(text: str) -> str:
    """`text` as literal mrkdwn: Slack's three control characters as their entities, so untrusted
    text cannot form a link (`<https://…|…>`) or a mention (`<!channel>`, `<@U…>`)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mrkdwn_fit(text: str, limit: int) -> str:
    """`text` escaped and cut to at most `limit` characters (an ellipsis marks a cut), never in
    the middle of an entity."""
    escaped = mrkdwn_escape(text)
    if len(escaped) <= limit:
        return escaped
    pieces: list[str] = []
    size = 0
    for char in text:
        piece = mrkdwn_escape(char)
        if size + len(piece) > limit - 1:
            break
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces) + "…"


def plain_fit(text: str, limit: int) -> str:
    """Text for a `plain_text` object (not parsed for links or mentions), cut to `limit`."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _plain(text: str, limit: int = 75) -> dict[str, Any]:
    return {"type": "plain_text", "text": plain_fit(text, limit), "emoji": False}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text, "verbatim": True}


# -- messages -------------------------------------------------------------------------------------


def _gate_blocks(gate: Gate, *, header: str) -> list[dict[str, Any]]:
    """The gate's header (`header`: what it waits for, or its outcome, and the tool) and what it
    asks: task, agent, rule, due time, goal and arguments."""
    task = gate.task
    facts = _("*Task %(task)s* (%(agent)s) · rule _%(rule)s_ · due %(due)s") % {
        "task": task.pk,
        "agent": mrkdwn_escape(task.agent),
        "rule": mrkdwn_escape(gate.rule),
        "due": moment(gate.due_at),
    }
    if gate.amount is not None:
        facts = _("%(facts)s · amount %(amount)s") % {"facts": facts, "amount": gate.amount}
    room = SECTION_TEXT_MAX - len(facts) - 20 - len(_("*Goal:* %(goal)s"))
    goal = _("*Goal:* %(goal)s") % {"goal": mrkdwn_fit(task.goal, room)}
    arguments = json.dumps(gate.arguments, indent=1, sort_keys=True, ensure_ascii=False)
    return [
        {"type": "header", "text": _plain(header, HEADER_TEXT_MAX)},
        {"type": "section", "text": _mrkdwn(f"{facts}\n{goal}")},
        {
            "type": "section",
            "text": _mrkdwn(
                _("*Arguments*") + "\n```" + mrkdwn_fit(arguments, SECTION_TEXT_MAX - 40) + "```"
            ),
        },
    ]


def _open_button(gate: Gate) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": OPEN,
        "text": _plain(_("Open in agentops")),
        "url": public_link(reverse("reviews:gate", args=[gate.pk])),
    }


def button_value(gate: Gate) -> str:
    """What a button carries back: the gate and the digest of the arguments the message shows
    (the decision is refused if they are not what the gate holds)."""
    return f"{gate.pk}:{gate.args_digest}"


def gate_message(gate: Gate, *, event: str = NoticeEvent.GATE_OPENED) -> dict[str, Any]:
    """The message of an open gate: what it asks, and Approve, Reject and Open buttons."""
    if event == NoticeEvent.GATE_DUE_SOON:
        header = _("Times out soon: %(tool)s") % {"tool": gate.tool}
    else:
        header = _("Approval needed: %(tool)s") % {"tool": gate.tool}
    value = button_value(gate)
    buttons = {
        Choice.APPROVE: {
            "type": "button",
            "action_id": APPROVE,
            "text": _plain(_("Approve")),
            "style": "primary",
            "value": value,
            "confirm": {
                "title": _plain(_("Approve this action?"), 100),
                "text": _plain(
                    _("%(tool)s runs with the arguments shown.") % {"tool": gate.tool}, 300
                ),
                "confirm": _plain(_("Approve"), 30),
                "deny": _plain(_("Cancel"), 30),
            },
        },
        Choice.REJECT: {
            "type": "button",
            "action_id": REJECT,
            "text": _plain(_("Reject…")),
            "style": "danger",
            "value": value,
        },
    }
    # The buttons of the choices the gate's kind offers through Slack (an agent's question:
    # none, it is answered on its page through the Open button).
    offered = channel_get(DeliveryChannel.SLACK).choices_for(gate)
    actions = {
        "type": "actions",
        "block_id": f"gate:{gate.pk}",
        "elements": [
            *(button for choice, button in buttons.items() if choice in offered),
            _open_button(gate),
        ],
    }
    fallback = _("%(header)s for task %(task)s. Goal: %(goal)s") % {
        "header": header,
        "task": gate.task_id,
        "goal": gate.task.goal,
    }
    return {
        "text": mrkdwn_fit(fallback, FALLBACK_TEXT_MAX),
        "blocks": [*_gate_blocks(gate, header=header), actions],
    }


# A decided gate's outcome, as its message's header and fallback name it.
OUTCOMES: dict[str, StrOrPromise] = {
    GateStatus.APPROVED: gettext_lazy("Approved"),
    GateStatus.REJECTED: gettext_lazy("Rejected"),
    GateStatus.EXPIRED: gettext_lazy("Expired"),
}


def _outcome(gate: Gate) -> str:
    return str(OUTCOMES.get(gate.status) or gate.get_status_display())


def _outcome_line(gate: Gate) -> str:
    decider = gate.decided_by.get_username() if gate.decided_by else ""
    # A username is letters, digits and @.+-_ (150 at most), never escaped, but escaped anyway.
    who = mrkdwn_escape(decider) if decider else _("nobody")
    when = moment(gate.decided_at) if gate.decided_at else ""
    if gate.status == GateStatus.APPROVED:
        return _(":white_check_mark: *Approved* by %(who)s · %(when)s") % {
            "who": who,
            "when": when,
        }
    if gate.status == GateStatus.REJECTED:
        # Room for the rest of the section: the line's words, a username (150 at most), the time,
        # and a late click's note (another name).
        reason = mrkdwn_fit(gate.feedback, SECTION_TEXT_MAX - 600)
        return _(":x: *Rejected* by %(who)s · %(when)s\n*Reason:* %(reason)s") % {
            "who": who,
            "when": when,
            "reason": reason,
        }
    if gate.status == GateStatus.EXPIRED:
        return _(":hourglass: *Expired* (nobody decided in time) · %(when)s") % {"when": when}
    return ""


def _late_line(gate: Gate, late_slack_user: str) -> str:
    """Who clicked after the gate was decided, and who (or the timeout) decided it first."""
    if gate.decided_by is None:
        return _("_<@%(user)s> clicked after it was already decided by the timeout._") % {
            "user": late_slack_user
        }
    return _("_<@%(user)s> clicked after it was already decided by %(who)s._") % {
        "user": late_slack_user,
        "who": mrkdwn_escape(gate.decided_by.get_username()),
    }


def gate_outcome_message(gate: Gate, *, late_slack_user: str = "") -> dict[str, Any]:
    """The message of a gate as it is now: decided (the outcome, and for a click that came after
    the decision, "already decided by X"), or still open (the actionable message)."""
    if gate.status == GateStatus.OPEN:
        return gate_message(gate)
    line = _outcome_line(gate)
    if late_slack_user:
        line += "\n" + _late_line(gate, late_slack_user)
    values = {"tool": gate.tool, "task": gate.task_id, "outcome": _outcome(gate)}
    return {
        "text": mrkdwn_fit(_("%(tool)s for task %(task)s: %(outcome)s") % values, 300),
        "blocks": [
            *_gate_blocks(gate, header=_("%(outcome)s: %(tool)s") % values),
            {"type": "section", "text": _mrkdwn(line)},
            {"type": "actions", "block_id": f"gate:{gate.pk}", "elements": [_open_button(gate)]},
        ],
    }


def notice_message(notice: Notice, link: str) -> dict[str, Any]:
    """A notice as a Slack message: an open gate's actionable message, or the notice's text with
    a link (a stopped task, a gate decided before the message went out)."""
    gate = notice.gate
    if gate is not None:
        return (
            gate_outcome_message(gate)
            if gate.status != GateStatus.OPEN
            else (gate_message(gate, event=notice.event))
        )
    text = mrkdwn_fit(notice_text(notice), SECTION_TEXT_MAX - 100)
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": _mrkdwn(text)},
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": OPEN,
                        "text": _plain(pgettext("button", "Open")),
                        "url": link,
                    }
                ],
            },
        ],
    }


def reject_modal(gate: Gate, *, digest: str, channel: str, ts: str) -> dict[str, Any]:
    """The modal that asks why (the agent re-plans from the reason); it remembers the gate, the
    digest the message showed (`digest`, from the clicked button: the rejection is refused if the
    proposal changed since) and the message to update."""
    metadata = {"gate": gate.pk, "digest": digest, "channel": channel, "ts": ts}
    return {
        "type": "modal",
        "callback_id": REJECT_VIEW,
        "private_metadata": json.dumps(metadata),
        "title": _plain(_("Reject"), MODAL_TITLE_MAX),
        "submit": _plain(_("Reject"), MODAL_TITLE_MAX),
        "close": _plain(_("Cancel"), MODAL_TITLE_MAX),
        "blocks": [
            {
                "type": "section",
                "text": _mrkdwn(
                    _(
                        "Reject *%(tool)s* of task %(task)s. The agent re-plans the step from "
                        "your reason."
                    )
                    % {"tool": mrkdwn_escape(gate.tool), "task": gate.task_id}
                ),
            },
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": _plain(_("Why?"), 2000),
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_INPUT,
                    "multiline": True,
                    "max_length": REASON_MAX,
                },
            },
        ],
    }


def notice_modal(title: str, text: str, *, link: str = "", link_label: str = "") -> dict[str, Any]:
    """A modal that only tells the person something (why a click was refused), with an optional
    link button."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": _mrkdwn(mrkdwn_fit(text, SECTION_TEXT_MAX))}
    ]
    if link:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {"type": "button", "action_id": OPEN, "text": _plain(link_label), "url": link}
                ],
            }
        )
    return {
        "type": "modal",
        "title": _plain(title, MODAL_TITLE_MAX),
        "close": _plain(pgettext("button", "OK"), MODAL_TITLE_MAX),
        "blocks": blocks,
    }


# -- the Web API ----------------------------------------------------------------------------------


def slack_notice_post(delivery: Delivery, link: str) -> str:
    """Post a Slack delivery's notice to its channel (chat.postMessage); returns the message's
    `ts`. A delivery's sender: retried with backoff when it raises."""
    if not slack_configured():
        raise SlackError("AGENTOPS_SLACK_BOT_TOKEN is not set")
    # A channel has no one person to write to: the site's language.
    with translation.override(settings.LANGUAGE_CODE):
        message = notice_message(delivery.notice, link)
    answer = slack_call(
        "chat.postMessage",
        {
            "channel": delivery.slack_channel,
            "unfurl_links": False,
            "unfurl_media": False,
            **message,
        },
    )
    ts = str(answer.get("ts", ""))
    notice = delivery.notice
    if notice.gate_id is not None and ts:
        slack_message_record(gate_id=notice.gate_id, channel=delivery.slack_channel, ts=ts)
    return ts


def _attempt_window() -> timedelta:
    """How long an update attempt may take before it counts as abandoned: the job's deadline and
    the sweeper's grace."""
    return timedelta(seconds=_job_timeout() + slack_conf("SWEEP_GRACE_SECONDS"))


def _job_timeout() -> int:
    """The update job's RQ timeout: room for its one Web API call."""
    seconds: float = slack_conf("SLACK_TIMEOUT_SECONDS")
    return max(5, math.ceil(seconds * 2) + 1)


def slack_message_update(*, message_id: int) -> str:
    """Show a kept gate message's gate as it is now (chat.update): the job. The attempt is
    claimed and counted first (committed), the call made with no transaction open, and the
    outcome recorded: shown, or tried again by a later sweep after a backoff that doubles, up to
    the notification attempt cap."""
    cap = slack_conf("NOTIFY_MAX_ATTEMPTS")
    attempt = slack_message_attempt_begin(message_id=message_id, window=_attempt_window(), cap=cap)
    if attempt is None:
        return "nothing to update"
    message = SlackMessage.objects.select_related("gate__task", "gate__decided_by").get(
        pk=message_id
    )
    gate = message.gate
    with translation.override(settings.LANGUAGE_CODE):
        content = gate_outcome_message(gate, late_slack_user=message.late_slack_user)
    try:
        slack_call("chat.update", {"channel": message.channel, "ts": message.ts, **content})
    except Exception as error:
        backoff = slack_conf("NOTIFY_BACKOFF_SECONDS") * 2 ** (attempt - 1)
        slack_message_attempt_record(
            message_id=message_id,
            attempt=attempt,
            error=str(redacted(f"{error.__class__.__name__}: {error}")),
            backoff=backoff,
        )
        logger.warning(
            "Slack update of message %s attempt %s failed: %s", message_id, attempt, error
        )
        if isinstance(error, (SlackError, httpx.HTTPError, OSError)):
            return f"attempt {attempt} failed"
        raise
    slack_message_attempt_record(message_id=message_id, attempt=attempt, shown=gate.status)
    return f"updated gate {gate.pk} in {message.channel}"


def _enqueue(message_id: int, attempts: int) -> bool:
    queue = queues.queue(queues.NOTICES)
    job_id = f"slack-update-{message_id}-{attempts}"
    if job_waiting(queue, job_id):
        return False
    queue.enqueue(
        "reviews.jobs.slack_message_update",
        message_id,
        job_id=job_id,
        meta=job_meta(),
        result_ttl=300,
        failure_ttl=86400,
        job_timeout=_job_timeout(),
    )
    return True


def slack_message_follow(*, gate_id: int, channel: str, ts: str, late_slack_user: str = "") -> None:
    """After a click (the decision committed): have the message show the gate now, with the late
    clicker's note when there is one. The update is enqueued at once; if that enqueue is lost
    (Redis away), the sweep finds the message stale and enqueues it."""
    message_id = slack_message_mark(
        gate_id=gate_id, channel=channel, ts=ts, late_slack_user=late_slack_user
    )
    try:
        _enqueue(
            message_id, SlackMessage.objects.values_list("attempts", flat=True).get(pk=message_id)
        )
    except Exception:
        logger.exception("could not enqueue the Slack update of message %s", message_id)


def slack_messages_sweep() -> int:
    """The sweeper's hook: enqueue an update of every kept gate message that no longer shows its
    gate (decided anywhere, or a late click to show), due and not in flight; returns how many."""
    if not slack_configured():
        return 0
    stale = slack_messages_stale(window=_attempt_window(), cap=slack_conf("NOTIFY_MAX_ATTEMPTS"))
    return sum(_enqueue(pk, attempts) for pk, attempts in stale.values_list("pk", "attempts"))
