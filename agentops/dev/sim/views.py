"""HTTP face of the simulated services, served by their own process (`agentops.dev.sim_settings`).

Machine-to-machine JSON over HTTP, with no sessions or cookies (so no CSRF to check). Write
endpoints honour `Idempotency-Key` (same key: the stored response and no new effect; same key with
another body: 409), echo the key they answer in the response's `Idempotency-Key` header, and
answer probes at `.../effects/<key>`. A caller that presents a scoped token (its scopes in
`X-OAuth-Scopes`, space-separated) may call only the endpoints whose scope it carries
(`service:operation`); without one it calls as the deployment's unrestricted key. A missing
scope is refused first, with 403 and `WWW-Authenticate: Bearer error="insufficient_scope",
scope="..."` (RFC 6750), naming the one scope the call needs. Faults set per endpoint apply next.
"""

from __future__ import annotations

import hashlib
import json
import time
import unicodedata
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from agentops.dev.sim.models import Effect, Fault, FaultMode
from agentops.dev.sim.world import ENDPOINTS, BadRequest, Conflict, Endpoint, NotFound

DEFAULT_TIMEOUT_SLEEP = 30.0
SCOPES_HEADER = "X-OAuth-Scopes"


def _canonical(value: Any) -> Any:
    """Strings in Unicode NFC, integral floats as ints (10.0 is 10), recursively."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def body_digest(body: Any) -> str:
    """The sha256 of a request body's canonical JSON (sorted keys, no whitespace, NFC strings,
    integral numbers as integers): the same request sent again, its keys in another order or an
    amount written 10.0, has the same digest. The simulated services are a third party: they
    compute it themselves, not with the product's code."""
    text = json.dumps(
        _canonical(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _error(status: int, message: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


def fault_take(service: str, operation: str) -> Fault | None:
    """The fault in force for this call, counting it down when it is limited to N calls."""
    with transaction.atomic():
        fault = (
            Fault.objects.select_for_update()
            .filter(service=service, operation=operation)
            .exclude(mode=FaultMode.OK)
            .first()
        )
        if fault is None or fault.remaining == 0:
            return None
        if fault.remaining is not None:
            Fault.objects.filter(pk=fault.pk).update(remaining=fault.remaining - 1)
        return fault


def _perform(
    ep: Endpoint, body: dict[str, Any], key: str | None, sent_key: str
) -> tuple[int, dict[str, Any]]:
    """Run the handler once per key; replay the stored response for a repeated key."""
    if not ep.writes:
        return 200, ep.handler(body)
    request_digest = body_digest(body)
    if key:
        existing = Effect.objects.filter(
            service=ep.service, operation=ep.operation, idempotency_key=key
        ).first()
        if existing is not None:
            if existing.request_digest != request_digest:
                return 409, {"error": "Idempotency-Key reused with a different request body"}
            return 200, existing.response
    response = ep.handler(body)
    try:
        with transaction.atomic():
            Effect.objects.create(
                service=ep.service,
                operation=ep.operation,
                idempotency_key=key,
                request_key=sent_key,
                request_digest=request_digest,
                request=body,
                response=response,
            )
    except IntegrityError:
        # A concurrent request with the same key won: answer as a replay.
        return _perform(ep, body, key, sent_key)
    return 200, response


@require_POST
def call(request: HttpRequest, service: str, operation: str) -> JsonResponse:
    ep = ENDPOINTS.get((service, operation))
    if ep is None:
        return _error(404, f"no endpoint {service}.{operation}")
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return _error(400, "body is not JSON")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object")
    refused = _scope_refusal(request, ep)
    if refused is not None:
        return refused
    fault = fault_take(service, operation)
    mode = fault.mode if fault else FaultMode.OK
    delay = fault.delay_seconds if fault else 0.0
    if mode == FaultMode.RATE_LIMITED:
        return _error(429, "rate limited", **{"Retry-After": str(max(1, round(delay or 1)))})
    if mode == FaultMode.ERROR_BEFORE:
        return _error(503, "service unavailable")
    if mode == FaultMode.FORBIDDEN:
        return _error(403, "forbidden: the caller may not do this")
    if mode == FaultMode.TIMEOUT_BEFORE:
        time.sleep(delay or DEFAULT_TIMEOUT_SLEEP)
        return _error(504, "gateway timeout")
    sent_key = request.headers.get("Idempotency-Key", "")
    key = (sent_key or None) if ep.keys else None
    answered_key = sent_key
    try:
        status, response = _perform(ep, body, key, sent_key)
        if mode == FaultMode.DUPLICATE:
            # The network delivered the request twice: the second copy is performed too.
            status, response = _perform(ep, body, key, sent_key)
        if mode == FaultMode.OUT_OF_ORDER:
            other = _another_response(ep, sent_key)
            if other is not None:
                answered_key, response = other
    except NotFound as exc:
        return _error(404, str(exc))
    except BadRequest as exc:
        return _error(400, str(exc))
    except Conflict as exc:
        return _error(409, str(exc))
    if mode == FaultMode.EXECUTE_THEN_TIMEOUT:
        time.sleep(delay or DEFAULT_TIMEOUT_SLEEP)
        return _error(504, "gateway timeout")
    if mode == FaultMode.EXECUTE_THEN_5XX:
        return _error(502, "bad gateway")
    if mode == FaultMode.SLOW:
        time.sleep(delay or 2.0)
    if mode == FaultMode.SCHEMA_CHANGE and status == 200:
        response = {"data": {"v2": response}, "api_version": "2"}
    answer = JsonResponse(response, status=status)
    if answered_key:
        answer["Idempotency-Key"] = answered_key
    return answer


def _scope_refusal(request: HttpRequest, ep: Endpoint) -> JsonResponse | None:
    """403 naming the missing scope when the caller's scoped token lacks the endpoint's scope;
    None when it carries it, or when the caller presents no scoped token."""
    presented = request.headers.get(SCOPES_HEADER)
    if presented is None or ep.scope in presented.split():
        return None
    response = JsonResponse(
        {
            "error": f"insufficient_scope: {ep.service}.{ep.operation} needs scope {ep.scope}",
            "required_scope": ep.scope,
        },
        status=403,
    )
    response["WWW-Authenticate"] = f'Bearer error="insufficient_scope", scope="{ep.scope}"'
    return response


def _another_response(ep: Endpoint, sent_key: str) -> tuple[str, dict[str, Any]] | None:
    """The latest response this endpoint gave to another request (a response delivered to the
    wrong caller), with that request's key; None when there is no other."""
    other = (
        Effect.objects.filter(service=ep.service, operation=ep.operation)
        .exclude(request_key=sent_key)
        .order_by("-id")
        .first()
    )
    return None if other is None else (other.request_key, other.response)


@require_GET
def probe(request: HttpRequest, service: str, operation: str, key: str) -> JsonResponse:
    ep = ENDPOINTS.get((service, operation))
    if ep is None or not ep.probe:
        return _error(404, f"no probe for {service}.{operation}")
    effect = Effect.objects.filter(
        service=service, operation=operation, idempotency_key=key
    ).first()
    if effect is None:
        return JsonResponse({"found": False}, status=404)
    return JsonResponse({"found": True, "response": effect.response})
