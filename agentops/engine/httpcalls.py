"""HTTP calls from tools to third-party services, with every failure classified for the ledger.

One rule for what an answer means, for the shipped agents and agents of other packages alike
(through `agentops.sdk`): a call carries the ledger's idempotency key, and the OAuth scopes it
holds (`X-OAuth-Scopes`) when its agent declares scopes. A timeout, a 5xx, a body of the wrong
shape or an answer to another request may have executed remotely (`maybe_executed`), so the ledger
probes before anything is retried; a connection that never opened did not. A 429 waits for its
`Retry-After`; a 401 or 403 is an authorization gap naming the scope a Bearer challenge asks for
(RFC 6750 §3); a 409 is a conflict and any other 4xx the request's fault, neither retried.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from agentops.engine.errors import FailureKind, ToolFailure
from agentops.engine.redaction import redacted_cut
from agentops.engine.registry import ToolContext
from agentops.engine.retry_after import retry_after_seconds
from agentops.engine.scopes import SCOPE

IDEMPOTENCY_HEADER = "Idempotency-Key"
SCOPES_HEADER = "X-OAuth-Scopes"
# The scope a Bearer challenge names (RFC 6750 §3): `scope="a:b c:d"`.
CHALLENGE_SCOPE = re.compile(r'scope="([^"]{1,200})"')


def http_post(
    call: ToolContext, url: str, body: dict[str, Any], *, name: str, expect: tuple[str, ...] = ()
) -> dict[str, Any]:
    """POST `body` as JSON to `url` within the call's timeout, with its idempotency key (and
    scopes); the JSON object answered, which must hold the `expect` keys. `name` names the
    operation in failures (`payments.refund`). Raises ToolFailure, classified."""
    headers = {IDEMPOTENCY_HEADER: call.idempotency_key}
    if call.scopes is not None:
        headers[SCOPES_HEADER] = " ".join(call.scopes)
    try:
        response = call.http.post(url, json=body, headers=headers, timeout=call.timeout)
    except httpx.TimeoutException:
        raise ToolFailure(
            f"{name} timed out after {call.timeout:g} s",
            kind=FailureKind.TIMEOUT,
            retryable=True,
            detail={"maybe_executed": True},
        ) from None
    except httpx.TransportError as exc:
        raise ToolFailure(
            f"{name} unreachable: {exc}",
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": False},
        ) from None
    answered = response.headers.get(IDEMPOTENCY_HEADER)
    if answered is not None and answered != call.idempotency_key:
        # A response to another request (out of order, misrouted): ours may have run, so the
        # ledger probes for it instead of trusting this body.
        raise ToolFailure(
            f"{name} answered another request (key {answered[:40]})",
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": True},
        )
    return http_answer(response, name=name, expect=expect)


def http_probe(call: ToolContext, url: str, *, name: str) -> dict[str, Any] | None:
    """GET `url`, where the remote says whether the effect with this call's key happened: the
    JSON object it answers, or None on a 404 (not done). Raises ToolFailure (unavailable) when it
    cannot tell, and the call's outcome stays unknown."""
    try:
        response = call.http.get(url, timeout=call.timeout)
    except httpx.HTTPError as exc:
        raise ToolFailure(f"probe of {name} failed: {exc}", kind=FailureKind.UNAVAILABLE) from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ToolFailure(
            f"probe of {name} answered {response.status_code}", kind=FailureKind.UNAVAILABLE
        )
    try:
        found = response.json()
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise ToolFailure(f"probe of {name} answered no JSON object", kind=FailureKind.UNAVAILABLE)
    return found


def http_answer(
    response: httpx.Response, *, name: str, expect: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The JSON object of a 2xx answer holding the `expect` keys; any other answer raises its
    ToolFailure (the module's rule)."""
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
        shape = f" (expected keys {', '.join(expect)})" if expect else ""
        raise ToolFailure(
            f"{name} answered in an unexpected shape{shape}",
            kind=FailureKind.SCHEMA_MISMATCH,
            retryable=False,
            detail={"maybe_executed": True, "body": redacted_cut(response.text, 500)},
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
    except (ValueError, AttributeError):
        return response.text[:200]
