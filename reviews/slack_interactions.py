"""Slack, the inbound half: a click on Approve or Reject in a gate message, and the reason typed
in the Reject modal, turned into the same gate decision as the browser's and the API's.

A request is accepted only when Slack signed it: `v0=` HMAC-SHA256 of `v0:<timestamp>:<body>`
with the app's signing secret (`AGENTOPS_SLACK_SIGNING_SECRET`), its timestamp within five minutes
of now, and its signature never seen before (`slack_request_record`: a replay is refused). Then:

- the Slack user (workspace and member ID, never a display name) maps to the product user who
  linked it on their account page; an unlinked user gets a modal with a link to do that;
- the decision is the one decision service's (`gate_decide` with the button's choice: roles,
  separation of duties, the claim, one decision however many clicks; the Reject button runs
  `gate_decide_check` before it asks why), logged with channel `slack`, and bound to the digest
  of the proposal the message showed: each button carries it (`reviews.slack.button_value`), the
  Reject modal keeps the clicked button's, and a proposal changed since the message was posted
  refuses the click as stale, like the browser's stale tab;
- the message is then updated by a job (`slack_message_update`): the outcome, "already decided
  by X" for a click that came late, or the proposal as it is now after a stale click. A refusal
  (not allowed, someone else's claim, a stale digest) is shown to the clicker alone, in a modal,
  and decides nothing.

Modals are opened in the request (`views.open`: the click's `trigger_id` is valid for three
seconds), outside any transaction and within the Web API deadline.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _

from agentops.engine import Choice, TransitionRefused, json_parsed, message_of
from agentops.models import Gate
from agentops.states import GateStatus
from reviews.channels import channel_get
from reviews.links import public_link
from reviews.models import SlackIdentity
from reviews.selectors import language_for
from reviews.services import GateAlreadyDecided, ReviewError, gate_decide, gate_decide_check
from reviews.services.slack import (
    REQUEST_WINDOW_SECONDS,
    slack_link_token,
    slack_request_record,
)
from reviews.slack import (
    APPROVE,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT,
    REJECT_VIEW,
    notice_modal,
    reject_modal,
    slack_message_follow,
)
from reviews.slack_web import SlackError, slack_call
from reviews.states import DeliveryChannel, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)


class BadPayload(ValueError):
    """The signed request is not an interaction this endpoint understands."""


@dataclass(frozen=True)
class Answer:
    """What the endpoint answers Slack: a status and, for a modal submission, a JSON body."""

    status: int = 200
    body: dict[str, Any] | None = None


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's request signature: `v0=` and the hex HMAC-SHA256 of `v0:<timestamp>:<body>`."""
    message = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_refusal(
    *, secret: str, body: bytes, timestamp: str | None, signature: str | None, now: float
) -> str | None:
    """Why a request is not Slack's (no or bad signature, a timestamp outside the window), or
    None when it is. The comparison takes constant time."""
    if not timestamp or not signature:
        return "unsigned: no X-Slack-Request-Timestamp or X-Slack-Signature"
    if not (timestamp.isascii() and timestamp.isdigit()):
        return "the timestamp is not a number of seconds"
    if abs(now - int(timestamp)) > REQUEST_WINDOW_SECONDS:
        return "the timestamp is more than five minutes from now"
    if not hmac.compare_digest(
        slack_signature(secret, timestamp, body).encode(), signature.encode("utf-8", "replace")
    ):
        return "the signature does not match"
    return None


def request_refusal(*, body: bytes, timestamp: str | None, signature: str | None) -> str | None:
    """Why this request is refused (not signed by Slack, or a replay), or None. A request that
    passes is recorded, committed, so the same request is refused the next time."""
    refusal = signature_refusal(
        secret=settings.AGENTOPS["SLACK_SIGNING_SECRET"],
        body=body,
        timestamp=timestamp,
        signature=signature,
        now=time.time(),
    )
    if refusal is None and not slack_request_record(signature=str(signature)):
        refusal = "replayed: this signed request was received before"
    return refusal


# -- reading the payload --------------------------------------------------------------------------


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            raise BadPayload(f"no {'.'.join(path)} in the payload")
        data = data[key]
    return data


def _text(data: Any, *path: str) -> str:
    value = _get(data, *path)
    if not isinstance(value, str):
        raise BadPayload(f"{'.'.join(path)} is not text")
    return value


def _gate_and_digest(value: str) -> tuple[int, str]:
    gate_id, _, digest = value.partition(":")
    if not gate_id.isdigit() or not digest:
        raise BadPayload(f"the button's value {value[:80]!r} names no gate")
    return int(gate_id), digest


def _slack_user(payload: dict[str, Any]) -> tuple[str, str]:
    """(team_id, user_id) of whoever acted: IDs only, never a name."""
    user_id = _text(payload, "user", "id")
    team = payload.get("team")
    team_id = team.get("id") if isinstance(team, dict) else None
    return str(team_id or _text(payload, "user", "team_id")), user_id


def _product_user(team_id: str, slack_user_id: str) -> User | None:
    found = (
        SlackIdentity.objects.select_related("user")
        .filter(team_id=team_id, slack_user_id=slack_user_id, user__is_active=True)
        .first()
    )
    return found.user if found else None


# -- answering ------------------------------------------------------------------------------------


def _modal_open(trigger_id: str, view: dict[str, Any]) -> None:
    """Open a modal for the clicker; a failure is logged (the click decided nothing more)."""
    try:
        slack_call("views.open", {"trigger_id": trigger_id, "view": view})
    except (SlackError, httpx.HTTPError) as exc:
        logger.warning("Slack views.open failed: %s", exc)


def _link_modal(team_id: str, slack_user_id: str) -> dict[str, Any]:
    """The modal that asks someone nobody knows yet to link their account: in the site's
    language (the product does not know whose language to use)."""
    token = slack_link_token(team_id=team_id, slack_user_id=slack_user_id)
    with translation.override(settings.LANGUAGE_CODE):
        return notice_modal(
            _("Link your account"),
            _(
                "Your Slack account is not linked to an agentops account yet. Link it once, "
                "signed in to agentops, then click again. (The link works for 15 minutes.)"
            ),
            link=public_link(reverse("reviews:slack_link", args=[token])),
            link_label=_("Link my account"),
        )


def _refusal_modal(gate_id: int, reason: str) -> dict[str, Any]:
    return notice_modal(
        _("Not decided"),
        _("Nothing was decided: %(reason)s.") % {"reason": reason},
        link=public_link(reverse("reviews:gate", args=[gate_id])),
        link_label=_("Open in agentops"),
    )


def _refused_as_not_open(gate_id: int, *, channel: str, ts: str, slack_user_id: str) -> bool:
    """After a decision refused because the gate was not open as the click saw it: have the
    message show the gate now. True when the gate is still open (the click showed a proposal that
    changed since: stale, and the clicker is told); False when it was decided first (a late
    click: the message names who decided)."""
    still_open = Gate.objects.filter(pk=gate_id, status=GateStatus.OPEN).exists()
    late = "" if still_open else slack_user_id
    slack_message_follow(gate_id=gate_id, channel=channel, ts=ts, late_slack_user=late)
    return still_open


def interaction_handle(payload: dict[str, Any]) -> Answer:
    """Act on one verified interaction: a button of a gate message, or the Reject modal's
    submission. Other interactions (the Open link button) are acknowledged and ignored."""
    kind = payload.get("type")
    if kind == "block_actions":
        return _button(payload)
    view = _get(payload, "view") if kind == "view_submission" else None
    if isinstance(view, dict) and view.get("callback_id") == REJECT_VIEW:
        return _reject_submitted(payload)
    return Answer()


@dataclass(frozen=True)
class Click:
    """Where a button was clicked (the message), the modal it may open, and by whom."""

    channel: str
    ts: str
    trigger_id: str
    slack_user_id: str


# What each button of a gate message decides.
BUTTON_CHOICES = {APPROVE: Choice.APPROVE, REJECT: Choice.REJECT}


def _button(payload: dict[str, Any]) -> Answer:
    actions = _get(payload, "actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise BadPayload("no actions in the payload")
    choice = BUTTON_CHOICES.get(str(actions[0].get("action_id")))
    if choice is None:
        return Answer()
    gate_id, digest = _gate_and_digest(_text(actions[0], "value"))
    channel = _text(payload, "container", "channel_id")
    ts = _text(payload, "container", "message_ts")
    trigger_id = _text(payload, "trigger_id")
    team_id, slack_user_id = _slack_user(payload)
    user = _product_user(team_id, slack_user_id)
    if user is None:
        _modal_open(trigger_id, _link_modal(team_id, slack_user_id))
        return Answer()
    # What the clicker alone is shown (a modal, a refusal), in their language.
    with translation.override(language_for(user)):
        return _clicked(
            user,
            choice,
            gate_id,
            digest,
            Click(channel=channel, ts=ts, trigger_id=trigger_id, slack_user_id=slack_user_id),
        )


def _clicked(user: User, choice: Choice, gate_id: int, digest: str, click: Click) -> Answer:
    """Decide (approve), or check and ask why (reject), as `user` with the clicked button's
    digest; a refusal is shown to the clicker alone, in a modal."""
    channel, ts, trigger_id = click.channel, click.ts, click.trigger_id
    slack_user_id = click.slack_user_id
    try:
        if choice == Choice.REJECT:
            # A rejection needs a reason: the same checks now, the decision when the modal with
            # the reason comes back (`_reject_submitted`), bound to the digest clicked here.
            gate = gate_decide_check(gate_id=gate_id, choice=choice, actor=user, seen_digest=digest)
            _modal_open(trigger_id, reject_modal(gate, digest=digest, channel=channel, ts=ts))
            return Answer()
        gate_decide(gate_id=gate_id, choice=choice, actor=user, seen_digest=digest, via=_via())
    except Gate.DoesNotExist:
        _modal_open(
            trigger_id,
            notice_modal(_("Not found"), _("There is no gate %(gate)s.") % {"gate": gate_id}),
        )
        return Answer()
    except GateAlreadyDecided as exc:
        if _refused_as_not_open(gate_id, channel=channel, ts=ts, slack_user_id=slack_user_id):
            _modal_open(trigger_id, _refusal_modal(gate_id, str(exc)))
        return Answer()
    except (ReviewError, TransitionRefused) as exc:
        _modal_open(trigger_id, _refusal_modal(gate_id, message_of(exc)))
        return Answer()
    slack_message_follow(gate_id=gate_id, channel=channel, ts=ts)
    return Answer()


def _via() -> Via:
    """A decision from Slack, as the decision log records it."""
    return channel_get(DeliveryChannel.SLACK).via()


def _errors(message: str) -> Answer:
    """Keep the modal open and show `message` under the reason."""
    return Answer(body={"response_action": "errors", "errors": {REASON_BLOCK: message[:150]}})


def _reject_submitted(payload: dict[str, Any]) -> Answer:
    view = _get(payload, "view")
    try:
        metadata = json_parsed(_text(view, "private_metadata"))
    except ValueError:
        raise BadPayload("the modal's metadata is not JSON") from None
    gate_id = _get(metadata, "gate")
    if not isinstance(gate_id, int):
        raise BadPayload("the modal names no gate")
    field = _get(view, "state", "values", REASON_BLOCK, REASON_INPUT)
    reason = (field.get("value") if isinstance(field, dict) else None) or ""
    if not isinstance(reason, str):
        raise BadPayload("the reason is not text")
    team_id, slack_user_id = _slack_user(payload)
    user = _product_user(team_id, slack_user_id)
    if user is None:
        with translation.override(settings.LANGUAGE_CODE):
            return _errors(_("your Slack account is not linked to agentops any more"))
    with translation.override(language_for(user)):
        return _reject_decided(user, gate_id, reason, metadata, slack_user_id)


def _reject_decided(
    user: User, gate_id: int, reason: str, metadata: Any, slack_user_id: str
) -> Answer:
    """Reject the gate as `user` with the reason typed in the modal, bound to the digest of the
    button clicked; a refusal keeps the modal open and says why."""
    channel, ts = _text(metadata, "channel"), _text(metadata, "ts")
    try:
        gate_decide(
            gate_id=gate_id,
            choice=Choice.REJECT,
            actor=user,
            seen_digest=_text(metadata, "digest"),
            reason=str(reason),
            via=_via(),
        )
    except Gate.DoesNotExist:
        return _errors(_("there is no gate %(gate)s") % {"gate": gate_id})
    except GateAlreadyDecided as exc:
        _refused_as_not_open(gate_id, channel=channel, ts=ts, slack_user_id=slack_user_id)
        return _errors(str(exc))
    except (ReviewError, TransitionRefused) as exc:
        return _errors(message_of(exc))
    slack_message_follow(gate_id=gate_id, channel=channel, ts=ts)
    return Answer()
