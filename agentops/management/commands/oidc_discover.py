"""`manage.py oidc_discover ISSUER`: the AGENTOPS_OIDC_* lines for a provider, from its discovery
document (ISSUER/.well-known/openid-configuration), for the operator to check and paste into the
environment. The settings take the endpoints as given and never ask the provider at start
(agentops/oidc_env.py says why), so this is the one time the document is read."""

from __future__ import annotations

from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

# The environment variable each endpoint of the discovery document goes to.
ENDPOINTS = {
    "AGENTOPS_OIDC_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "AGENTOPS_OIDC_TOKEN_ENDPOINT": "token_endpoint",
    "AGENTOPS_OIDC_USERINFO_ENDPOINT": "userinfo_endpoint",
    "AGENTOPS_OIDC_JWKS_URI": "jwks_uri",
    "AGENTOPS_OIDC_END_SESSION_ENDPOINT": "end_session_endpoint",
}


class Command(BaseCommand):
    help = "Print the AGENTOPS_OIDC_* endpoint settings from an OpenID Provider's discovery."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("issuer", help="the provider's issuer URL, exactly as it writes it")
        parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")

    def handle(self, *args: object, issuer: str, timeout: float, **opts: object) -> None:
        url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
        try:
            response = httpx.get(url, timeout=timeout)
            response.raise_for_status()
            document: dict[str, Any] = response.json()
        except (httpx.HTTPError, ValueError) as error:
            raise CommandError(f"could not read {url}: {error}") from None
        if document.get("issuer") != issuer:
            raise CommandError(
                f"{url} names the issuer {document.get('issuer')!r}, not {issuer!r}: use that "
                "one, exactly (the ID tokens' iss is compared character for character)"
            )
        self.stdout.write(f"AGENTOPS_OIDC_ISSUER={issuer}")
        for variable, key in ENDPOINTS.items():
            if document.get(key):
                self.stdout.write(f"{variable}={document[key]}")
        algorithms = document.get("id_token_signing_alg_values_supported") or []
        if "RS256" not in algorithms:
            self.stdout.write(f"# the provider signs ID tokens with {', '.join(algorithms)}")
        self.stdout.write("# and the client's AGENTOPS_OIDC_CLIENT_ID, AGENTOPS_OIDC_CLIENT_SECRET")
