"""HTTP calls from tools to third-party services, with failures classified for the ledger.

Every call carries the ledger's idempotency key, and the OAuth scopes the call holds (the agent's
credential and the grants in force, in `X-OAuth-Scopes`) when the agent declares scopes. A
refusal for a missing scope (403 with `WWW-Authenticate: Bearer error="insufficient_scope",
scope="..."`, RFC 6750) is an authorization gap that names the scope. A timeout or a 5xx after
the request was sent may have executed remotely (`maybe_executed`), so the ledger probes before
anything is retried.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from agentops.sdk import SCOPE, FailureKind, ToolContext, ToolFailure, retry_after_seconds

SCOPES_HEADER = "X-OAuth-Scopes"
# The scope a Bearer challenge names (RFC 6750 §3): `scope="a:b c:d"`.
CHALLENGE_SCOPE = re.compile(r'scope="([^"]{1,200})"')


def post(
    ctx: ToolContext, service: str, operation: str, body: dict[str, Any], *, expect: tuple[str, ...]
) -> dict[str, Any]:
    """POST `body` to the service; return the JSON object, which must hold the `expect` keys."""
    url = f"{ctx.base_url}/{service}/{operation}"
    headers = {"Idempotency-Key": ctx.idempotency_key}
    if ctx.scopes is not None:
        headers[SCOPES_HEADER] = " ".join(ctx.scopes)
    try:
        response = ctx.http.post(url, json=body, headers=headers, timeout=ctx.timeout)
    except httpx.TimeoutException:
        raise ToolFailure(
            f"{service}.{operation} timed out after {ctx.timeout:g} s",
            kind=FailureKind.TIMEOUT,
            retryable=True,
            detail={"maybe_executed": True},
        ) from None
    except httpx.TransportError as exc:
        raise ToolFailure(
            f"{service}.{operation} unreachable: {exc}",
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": False},
        ) from None
    answered = response.headers.get("Idempotency-Key")
    if answered is not None and answered != ctx.idempotency_key:
        # A response to another request (out of order, misrouted): ours may have run, so the
        # ledger probes for it instead of trusting this body.
        raise ToolFailure(
            f"{service}.{operation} answered another request (key {answered[:40]})",
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": True},
        )
    return _checked(response, service, operation, expect)


def probe(ctx: ToolContext, service: str, operation: str) -> dict[str, Any] | None:
    """Ask the service whether the effect with this key happened: its response, or None."""
    url = f"{ctx.base_url}/{service}/{operation}/effects/{ctx.idempotency_key}"
    try:
        response = ctx.http.get(url, timeout=ctx.timeout)
    except httpx.HTTPError as exc:
        raise ToolFailure(
            f"probe of {service}.{operation} failed: {exc}", kind=FailureKind.UNAVAILABLE
        ) from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ToolFailure(
            f"probe of {service}.{operation} answered {response.status_code}",
            kind=FailureKind.UNAVAILABLE,
        )
    answer: dict[str, Any] | None = response.json()["response"]
    return answer


def _checked(
    response: httpx.Response, service: str, operation: str, expect: tuple[str, ...]
) -> dict[str, Any]:
    name = f"{service}.{operation}"
    status = response.status_code
    if status == 429:
        raise ToolFailure(
            f"{name} rate limited (429)",
            kind=FailureKind.RATE_LIMITED,
            retryable=True,
            retry_after=retry_after_seconds(response.headers),
        )
    if status in (401, 403):
        scope = missing_scope(response)
        raise ToolFailure(
            f"{name} refused: {status} {_message(response)}",
            kind=FailureKind.AUTHORIZATION_GAP,
            retryable=False,
            detail={"missing_scope": scope} if scope else None,
        )
    if status == 409:
        raise ToolFailure(
            f"{name} conflict: {_message(response)}", kind=FailureKind.CONFLICT, retryable=False
        )
    if status >= 500:
        raise ToolFailure(
            f"{name} answered {status}",
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": True},
        )
    if status >= 400:
        raise ToolFailure(
            f"{name} rejected the request: {status} {_message(response)}",
            kind=FailureKind.BAD_REQUEST,
            retryable=False,
        )
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict) or any(key not in data for key in expect):
        raise ToolFailure(
            f"{name} answered in an unexpected shape (expected keys {', '.join(expect)})",
            kind=FailureKind.SCHEMA_MISMATCH,
            retryable=False,
            detail={"maybe_executed": True, "body": response.text[:500]},
        )
    return data


def missing_scope(response: httpx.Response) -> str | None:
    """The one scope an `insufficient_scope` challenge names, if it is a well-formed scope."""
    challenge = response.headers.get("WWW-Authenticate", "")
    if "insufficient_scope" not in challenge:
        return None
    found = CHALLENGE_SCOPE.search(challenge)
    scopes = found.group(1).split() if found else []
    if len(scopes) != 1 or not SCOPE.fullmatch(scopes[0]):
        return None
    return scopes[0]


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))[:200]
    except ValueError:
        return response.text[:200]
