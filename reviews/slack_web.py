"""The Slack Web API client, the one place every call to Slack goes through: the bot token as a
bearer header, the arguments encoded as the method takes them, a deadline, and Slack's answer
read (`ok: false` is an error). Messages and modals are `reviews.slack`'s; the account link that
asks Slack who a user is is `reviews.services.slack`'s.

Every call is made with no transaction open (`outbound_check`) and waits at most
`AGENTOPS_SLACK_TIMEOUT_SECONDS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
from django.conf import settings

from agentops.engine import outbound_check, outbound_tls

# Methods that take their arguments form-encoded only (Slack: "This method does not currently
# accept application/json"); every other method the product calls takes a JSON body.
FORM_METHODS = frozenset({"users.info"})


class SlackError(Exception):
    """The Web API refused a call (`ok: false`, with its error) or answered no JSON. `error` is
    Slack's error code ("" when the answer named none)."""

    def __init__(self, message: str, *, error: str = "") -> None:
        super().__init__(message)
        self.error = error


def slack_conf(name: str) -> Any:
    return settings.AGENTOPS[name]


def slack_configured() -> bool:
    return bool(slack_conf("SLACK_BOT_TOKEN"))


def _encoded(method: str, payload: dict[str, Any]) -> tuple[bytes, str]:
    if method in FORM_METHODS:
        return urlencode(payload).encode(), "application/x-www-form-urlencoded"
    return json.dumps(payload).encode(), "application/json; charset=utf-8"


def slack_call(method: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Call a Slack Web API method with the bot token, its arguments (a JSON body, or a form for
    the methods that take no JSON) and a deadline; returns the answer, or raises SlackError
    (`ok: false`), httpx.HTTPError (network, timeout, non-2xx)."""
    outbound_check(f"Slack {method}")
    content, content_type = _encoded(method, payload)
    response = httpx.post(
        f"{slack_conf('SLACK_API_URL')}/{method}",
        content=content,
        headers={
            "Authorization": f"Bearer {slack_conf('SLACK_BOT_TOKEN')}",
            "Content-Type": content_type,
            "User-Agent": "agentops-slack",
        },
        timeout=slack_conf("SLACK_TIMEOUT_SECONDS"),
        follow_redirects=False,
        verify=outbound_tls(),
    )
    response.raise_for_status()
    try:
        answer: dict[str, Any] = response.json()
    except ValueError:
        raise SlackError(f"{method}: the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise SlackError(f"{method}: the answer is not a JSON object")
    if not answer.get("ok"):
        error = str(answer.get("error", ""))
        raise SlackError(f"{method}: {error or 'no error named'}", error=error)
    return answer


@dataclass(frozen=True)
class SlackProfile:
    """Who a Slack user is, as Slack says (`users.info`): their workspace, whether the account
    is deleted or a bot, and their profile email ("" when Slack shares none: the app lacks the
    `users:read.email` scope, or the account has no email)."""

    user_id: str
    team_id: str
    email: str
    deleted: bool
    is_bot: bool


def slack_user_profile(slack_user_id: str) -> SlackProfile:
    """Ask Slack who `slack_user_id` is (users.info, which needs the `users:read` scope, and
    `users:read.email` for the email). Raises what `slack_call` raises."""
    answer = slack_call("users.info", {"user": slack_user_id})
    user = answer.get("user")
    if not isinstance(user, dict):
        raise SlackError("users.info: the answer names no user")
    profile = user.get("profile")
    email = profile.get("email") if isinstance(profile, dict) else None
    return SlackProfile(
        user_id=str(user.get("id", "")),
        team_id=str(user.get("team_id", "")),
        email=email if isinstance(email, str) else "",
        deleted=user.get("deleted") is not False,
        is_bot=bool(user.get("is_bot")) or user.get("id") == "USLACKBOT",
    )
