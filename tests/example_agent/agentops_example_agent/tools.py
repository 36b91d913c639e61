"""The parcel-notice tools: where a parcel is (a read) and an email to its customer (a
notification the email service sends once per idempotency key).

A tool is a typed function of a `ToolContext` and keyword-only arguments. The engine checks the
model's arguments against their types before anything is recorded, records the call in the
ledger with its idempotency key, and decides on a retry from the `ToolFailure` the tool raises.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from pydantic import BaseModel, Field

from agentops.sdk import FailureKind, ToolContext, ToolFailure, retry_after_seconds, tool

# An order number as the shop writes it: a letter and digits.
OrderId = Annotated[str, Field(pattern=r"^[A-Z][0-9]{3,12}$")]


class Parcel(BaseModel):
    """What the logistics service answers: the result `locate_parcel` promises."""

    order_id: str
    status: str
    carrier: str


@tool(
    side_effect="read",
    systems=("logistics",),
    result=Parcel,
    timeout=3.0,
    max_attempts=3,
    backoff_base=0.5,
)
def locate_parcel(call: ToolContext, *, order_id: OrderId) -> dict[str, Any]:
    """Where the parcel of an order is, and who carries it."""
    return post(call, "logistics/track", {"order_id": order_id})


@tool(side_effect="notify", systems=("email",), idempotent_remote=True, max_attempts=2)
def notify_customer(
    call: ToolContext,
    *,
    to: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")],
    subject: Annotated[str, Field(min_length=1, max_length=200)],
    body: Annotated[str, Field(min_length=1, max_length=4000)],
) -> dict[str, Any]:
    """Email the customer."""
    return post(call, "email/send", {"to": to, "subject": subject, "body": body})


@notify_customer.probe
def _notice_sent(call: ToolContext) -> dict[str, Any] | None:
    """The email sent under this call's key, or None: asked when a call's outcome was lost."""
    try:
        response = call.http.get(
            f"{call.base_url}/email/send/effects/{call.idempotency_key}", timeout=call.timeout
        )
    except httpx.HTTPError as exc:
        raise ToolFailure(
            f"probe of email/send failed: {exc}", kind=FailureKind.UNAVAILABLE
        ) from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ToolFailure(
            f"probe of email/send answered {response.status_code}", kind=FailureKind.UNAVAILABLE
        )
    sent: dict[str, Any] = response.json()["response"]
    return sent


def post(call: ToolContext, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST `body` to the services with the call's idempotency key; a failure, classified."""
    try:
        response = call.http.post(
            f"{call.base_url}/{path}",
            json=body,
            headers={"Idempotency-Key": call.idempotency_key},
            timeout=call.timeout,
        )
    except httpx.TimeoutException:
        # The request may have been sent and run: the ledger probes before any retry.
        raise ToolFailure(
            f"{path} timed out after {call.timeout:g} s",
            kind=FailureKind.TIMEOUT,
            retryable=True,
            detail={"maybe_executed": True},
        ) from None
    except httpx.TransportError as exc:
        raise ToolFailure(
            f"{path} unreachable: {exc}", kind=FailureKind.UNAVAILABLE, retryable=True
        ) from None
    if response.status_code == 429:
        raise ToolFailure(
            f"{path} rate limited",
            kind=FailureKind.RATE_LIMITED,
            retryable=True,
            retry_after=retry_after_seconds(response.headers),
        )
    if response.status_code >= 500:
        raise ToolFailure(
            f"{path} answered {response.status_code}",
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": True},
        )
    if response.status_code >= 400:
        raise ToolFailure(
            f"{path} refused the request ({response.status_code})", kind=FailureKind.BAD_REQUEST
        )
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ToolFailure(
            f"{path} answered in an unexpected shape",
            kind=FailureKind.SCHEMA_MISMATCH,
            detail={"maybe_executed": True},
        )
    return answer
