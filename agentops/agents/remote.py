"""The simulated third-party services as the shipped agents reach them: an operation is
`POST {base_url}/{service}/{operation}`, and its probe `GET .../effects/{key}`, whose answer
holds the effect's recorded response.

What an answer means (timeouts and 5xx that may have executed, 429s, missing scopes, the wrong
shape) is the product's one rule, `agentops.sdk.http_post`: an agent of another package calls it
with its own services' URLs. `SERVICES` is the setting these agents need (`Agent.needs`).
"""

from __future__ import annotations

from typing import Any

from agentops.sdk import Need, ToolContext, http_post, http_probe

# What every shipped agent that calls a service needs: where the services answer. Development
# mode defaults it to the simulated services; production has no default, so these agents are
# not offered until it is set.
SERVICES = Need(
    "AGENTOPS_SIM_BASE_URL",
    "the base URL of the shipped agents' services: orders, eligibility, logistics, payments, "
    "email, flights, hotels, suppliers",
)


def post(
    ctx: ToolContext, service: str, operation: str, body: dict[str, Any], *, expect: tuple[str, ...]
) -> dict[str, Any]:
    """POST `body` to the service; return the JSON object, which must hold the `expect` keys."""
    url = f"{ctx.base_url}/{service}/{operation}"
    return http_post(ctx, url, body, name=f"{service}.{operation}", expect=expect)


def probe(ctx: ToolContext, service: str, operation: str) -> dict[str, Any] | None:
    """Ask the service whether the effect with this key happened: its response, or None."""
    url = f"{ctx.base_url}/{service}/{operation}/effects/{ctx.idempotency_key}"
    found = http_probe(ctx, url, name=f"{service}.{operation}")
    if found is None:
        return None
    answer: dict[str, Any] | None = found["response"]
    return answer
