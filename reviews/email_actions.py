"""Acting from the email: a gate email carries an Approve and a Reject link, each signed for its
one recipient (Django's `TimestampSigner`: the gate, the user, the action and the digest of the
arguments the email showed), usable once, for `AGENTOPS_EMAIL_ACTION_MAX_AGE_SECONDS`.

A link opens a confirmation page after sign-in; a GET never decides. The POST (with its CSRF
token) decides through the one decision service, as the panel, the API and Slack do
(`gate_decide` with the link's choice: roles, separation of duties, the claim, the digest), with
channel `email`, and records the link as used in the same transaction: a refused decision leaves
the link usable, and a used link, an expired or tampered one, or someone else's decides nothing.
The confirmation page asks the service's checks first (`gate_decide_check`).

The email itself: the plain text puts the notice on one line (a goal cannot fake a line of its
own, such as another "Approve:" link), and the HTML alternative is a template with autoescape.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _

from agentops.engine import Choice
from agentops.models import Gate
from agentops.states import GateStatus
from policies.phrases import kept
from reviews.channels import channel_get
from reviews.links import public_link
from reviews.models import EmailActionUse
from reviews.notice_text import goal_line, headline, moment, notice_sentence, notice_text
from reviews.selectors import language_for
from reviews.services import NotAllowed, ReviewError, gate_decide
from reviews.states import DeliveryChannel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from reviews.models import Delivery, Notice

SALT = "reviews.email_action"
# A link's action is a choice of the decision service.
APPROVE, REJECT = Choice.APPROVE.value, Choice.REJECT.value
ACTIONS = (APPROVE, REJECT)


class LinkRefused(ReviewError):
    """The link cannot act: tampered with, expired, or used already. `http_status` is the
    page's."""

    def __init__(self, message: str, *, http_status: int) -> None:
        super().__init__(message)
        self.http_status = http_status


@dataclass(frozen=True)
class EmailAction:
    """What a link says: `user_id` may `action` gate `gate_id` as the email showed it
    (`digest`)."""

    gate_id: int
    user_id: int
    action: str
    digest: str


def _max_age() -> int:
    seconds: int = settings.AGENTOPS["EMAIL_ACTION_MAX_AGE_SECONDS"]
    return seconds


def email_action_token(*, gate: Gate, user: User, action: str) -> str:
    if action not in ACTIONS:
        raise ValueError(f"unknown email action {action!r}")
    payload = {"g": gate.pk, "u": user.pk, "a": action, "d": gate.args_digest}
    return signing.TimestampSigner(salt=SALT).sign_object(payload)


def email_action_link(*, gate: Gate, user: User, action: str) -> str:
    token = email_action_token(gate=gate, user=user, action=action)
    return public_link(reverse("reviews:email_action", args=[token]))


def email_action_read(token: str) -> EmailAction:
    """The action a token names; LinkRefused when it is tampered with or older than the limit."""
    signer = signing.TimestampSigner(salt=SALT)
    try:
        found = signer.unsign_object(token, max_age=_max_age())
    except signing.SignatureExpired:
        raise LinkRefused(
            _("this link has expired: open the gate in agentops to decide it"), http_status=410
        ) from None
    except signing.BadSignature:
        raise LinkRefused(
            _("this link is not valid: use the one from the email"), http_status=400
        ) from None
    if not isinstance(found, dict) or found.get("a") not in ACTIONS:
        raise LinkRefused(_("this link is not valid: use the one from the email"), http_status=400)
    return EmailAction(int(found["g"]), int(found["u"]), str(found["a"]), str(found["d"]))


def email_action_choice(token: str) -> str:
    """What a link asks ("approve" or "reject") when its signature holds, expired or not: a
    refused link's page is still named for it. "" for a tampered link."""
    try:
        found = signing.TimestampSigner(salt=SALT).unsign_object(token)
    except signing.BadSignature:
        return ""
    choice = found.get("a") if isinstance(found, dict) else None
    return str(choice) if choice in ACTIONS else ""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def email_action_check(*, token: str, user: User) -> EmailAction:
    """The action of a link `user` may use: LinkRefused (tampered, expired, used) or NotAllowed
    (it was sent to someone else). Whether the gate may still be decided is the decision's."""
    action = email_action_read(token)
    if action.user_id != user.pk:
        raise NotAllowed(_("this link was sent to someone else: open the gate in agentops"))
    if EmailActionUse.objects.filter(token_digest=_digest(token)).exists():
        raise LinkRefused(_("this link was used already"), http_status=410)
    return action


def email_action_take(*, token: str, user: User, reason: str) -> EmailAction:
    """Decide the gate as the link says, as `user`, with channel `email`, and mark the link used,
    in one transaction. Raises what `email_action_check` raises, and the decision's refusals
    (GateAlreadyDecided, NotAllowed, HeldByOther, ReviewError)."""
    action = email_action_check(token=token, user=user)
    with transaction.atomic():
        try:
            with transaction.atomic():
                EmailActionUse.objects.create(
                    token_digest=_digest(token),
                    user=user,
                    gate_id_ref=action.gate_id,
                    action=action.action,
                )
        except IntegrityError:
            raise LinkRefused(_("this link was used already"), http_status=410) from None
        gate_decide(
            gate_id=action.gate_id,
            choice=Choice(action.action),
            actor=user,
            seen_digest=action.digest,
            reason=reason,
            via=channel_get(DeliveryChannel.EMAIL).via(),
        )
    return action


# -- the email ------------------------------------------------------------------------------------


def one_line(text: str) -> str:
    """`text` with every run of whitespace (line breaks included) as one space."""
    return " ".join(text.split())


@dataclass(frozen=True)
class ActionLinks:
    approve: str
    reject: str
    expires_at: datetime


def _action_links(delivery: Delivery) -> ActionLinks | None:
    """The Approve and Reject links of an email about an open gate, for its recipient."""
    gate, user = delivery.notice.gate, delivery.user
    if gate is None or user is None or gate.status != GateStatus.OPEN or not _max_age():
        return None
    # Links for the choices the gate's kind offers by email (an agent's question: none, it is
    # answered on its page).
    if not {APPROVE, REJECT} <= set(channel_get(DeliveryChannel.EMAIL).choices_for(gate)):
        return None
    return ActionLinks(
        approve=email_action_link(gate=gate, user=user, action=APPROVE),
        reject=email_action_link(gate=gate, user=user, action=REJECT),
        expires_at=timezone.now() + timedelta(seconds=_max_age()),
    )


def notice_email_text(*, text: str, link: str, actions: ActionLinks | None) -> str:
    """The plain text of a notice's email: `text` (the notice: what happened and the goal) on
    one line, the link to its page and an open gate's action links, each on a labelled line."""
    lines = [one_line(text), "", _("Open it: %(link)s") % {"link": link}]
    if actions is not None:
        lines += [
            "",
            _("Approve: %(link)s") % {"link": actions.approve},
            _("Reject: %(link)s") % {"link": actions.reject},
            "",
            _links_explained(actions),
        ]
    body = "\n".join(lines) + "\n"
    return body


def _links_explained(actions: ActionLinks) -> str:
    """What the action links do, and until when (the email's text and HTML say the same)."""
    return _(
        "Each link opens a page where you confirm (after signing in); it works once, for you "
        "only, until %(when)s."
    ) % {"when": moment(actions.expires_at)}


def notice_email_html(*, notice: Notice, link: str, actions: ActionLinks | None) -> str:
    """The HTML alternative of a notice's email (autoescaped; the record's values in it are
    marked to stay as written)."""
    return render_to_string(
        "reviews/email/notice.html",
        {
            "headline": headline(notice),
            "sentence": mark_safe(notice_sentence(notice, kept)),
            "goal": mark_safe(goal_line(notice.task.goal, kept)),
            "gate": notice.gate,
            "link": link,
            "actions": actions,
            "explained": _links_explained(actions) if actions else "",
        },
    )


def notice_email(delivery: Delivery, link: str) -> EmailMultiAlternatives:
    """The email of a delivery: the notice, its link, and for an open gate the action links, as
    plain text with an HTML alternative, written in the recipient's language (their choice,
    else the site's) when it is sent."""
    notice = delivery.notice
    assert delivery.user is not None, "an email delivery has a recipient"
    actions = _action_links(delivery)
    with translation.override(language_for(delivery.user)):
        message = EmailMultiAlternatives(
            subject=f"[agentops] {headline(notice)}",
            body=notice_email_text(text=notice_text(notice), link=link, actions=actions),
            to=[delivery.user.email],
        )
        message.attach_alternative(
            notice_email_html(notice=notice, link=link, actions=actions), "text/html"
        )
    return message
