"""HTTP calls from tools to third-party services, with failures classified for the ledger.

Every call carries the ledger's idempotency key. A timeout or a 5xx after the request was sent may
have executed remotely (`maybe_executed`), so the ledger probes before anything is retried.
"""

from __future__ import annotations

from typing import Any

import httpx

from agentops.engine.errors import FailureKind, ToolFailure
from agentops.engine.registry import ToolContext
from agentops.engine.retry_after import retry_after_seconds


def post(
    ctx: ToolContext, service: str, operation: str, body: dict[str, Any], *, expect: tuple[str, ...]
) -> dict[str, Any]:
    """POST `body` to the service; return the JSON object, which must hold the `expect` keys."""
    url = f"{ctx.base_url}/{service}/{operation}"
    try:
        response = ctx.http.post(
            url, json=body, headers={"Idempotency-Key": ctx.idempotency_key}, timeout=ctx.timeout
        )
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
        raise ToolFailure(
            f"{name} refused: {status} {_message(response)}",
            kind=FailureKind.AUTHORIZATION_GAP,
            retryable=False,
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


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))[:200]
    except ValueError:
        return response.text[:200]
