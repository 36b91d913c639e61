"""The parcel-notice tools: where a parcel is (a read) and an email to its customer (a
notification the email service sends once per idempotency key).

A tool is a typed function of a `ToolContext` and keyword-only arguments. The engine checks the
model's arguments against their types before anything is recorded, records the call in the
ledger with its idempotency key, and decides on a retry from the `ToolFailure` the tool raises.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from agentops.sdk import ToolContext, http_post, http_probe, tool

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
    url = f"{call.base_url}/email/send/effects/{call.idempotency_key}"
    found = http_probe(call, url, name="email/send")
    return None if found is None else dict(found["response"])


def post(call: ToolContext, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST `body` to the services with the call's idempotency key. `http_post` classifies what
    comes back for the ledger: a timeout or a 5xx may have run (the ledger probes before any
    retry), a 429 waits for its Retry-After, a 403 names the missing scope, a 4xx is not retried."""
    return http_post(call, f"{call.base_url}/{path}", body, name=path)
