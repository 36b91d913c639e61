"""Single sign-on's settings, from AGENTOPS_OIDC_* (docs/operations.md, "Single sign-on").

Single sign-on is on when any of `REQUIRED` is set, and then each of them must be: a partial
configuration stops the process naming the first variable it lacks. The provider's endpoints are
given, not discovered from its /.well-known/openid-configuration: every process reads the settings
(workers, the sweeper, each command), and none of them should fail to start, or wait, because the
identity provider is down or slow; `manage.py oidc_discover ISSUER` prints these variables from a
provider's discovery document for an operator to paste. Local passwords can be turned off only
when single sign-on is on (nobody could sign in otherwise).

Pure: the settings import it before Django is set up.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit

from agentops.plumbing.envvars import env_bool, env_choice, env_float, env_list, refuse

REQUIRED = (
    "AGENTOPS_OIDC_ISSUER",
    "AGENTOPS_OIDC_CLIENT_ID",
    "AGENTOPS_OIDC_CLIENT_SECRET",
    "AGENTOPS_OIDC_AUTHORIZATION_ENDPOINT",
    "AGENTOPS_OIDC_TOKEN_ENDPOINT",
    "AGENTOPS_OIDC_USERINFO_ENDPOINT",
    "AGENTOPS_OIDC_JWKS_URI",
)
# The ID token's signature algorithms the product accepts (asymmetric only: the provider's key,
# published at its JWKS URI, never the client secret).
SIGN_ALGORITHMS = ("RS256", "PS256", "ES256")
BACKEND = "agentops.oidc.ProviderBackend"


def oidc_url(name: str) -> str:
    """The URL in `name` exactly as written (an issuer is compared character for character)."""
    value = os.environ.get(name, "").strip()
    if value and not re.fullmatch(r"https?://[^\s/?#]+(/\S*)?", value):
        refuse(name, f"must be an http(s) URL, not {value!r}")
    return value


def groups_map(name: str) -> dict[str, list[str]]:
    """`provider group=product group,...` as {provider group: [product groups]} (a provider
    group may be named twice, for two product groups)."""
    mapping: dict[str, list[str]] = {}
    for pair in env_list(name):
        provider_group, equals, product_group = pair.partition("=")
        if not equals or not provider_group.strip() or not product_group.strip():
            refuse(name, f"must be provider-group=product group pairs, comma-separated: {pair!r}")
        mapping.setdefault(provider_group.strip(), []).append(product_group.strip())
    return mapping


def oidc_enabled() -> bool:
    return any(os.environ.get(name, "").strip() for name in REQUIRED)


def library_settings() -> dict[str, Any]:
    """mozilla-django-oidc's settings (`OIDC_*`), or {} when single sign-on is off."""
    if not oidc_enabled():
        return {}
    for name in REQUIRED:
        if not os.environ.get(name, "").strip():
            refuse(name, "is not set, and single sign-on (the other AGENTOPS_OIDC_ are) needs it")
    return {
        "OIDC_RP_CLIENT_ID": os.environ["AGENTOPS_OIDC_CLIENT_ID"].strip(),
        "OIDC_RP_CLIENT_SECRET": os.environ["AGENTOPS_OIDC_CLIENT_SECRET"].strip(),
        "OIDC_OP_AUTHORIZATION_ENDPOINT": oidc_url("AGENTOPS_OIDC_AUTHORIZATION_ENDPOINT"),
        "OIDC_OP_TOKEN_ENDPOINT": oidc_url("AGENTOPS_OIDC_TOKEN_ENDPOINT"),
        "OIDC_OP_USER_ENDPOINT": oidc_url("AGENTOPS_OIDC_USERINFO_ENDPOINT"),
        "OIDC_OP_JWKS_ENDPOINT": oidc_url("AGENTOPS_OIDC_JWKS_URI"),
        "OIDC_RP_SIGN_ALGO": env_choice("AGENTOPS_OIDC_SIGN_ALGO", "RS256", SIGN_ALGORITHMS),
        "OIDC_RP_SCOPES": os.environ.get("AGENTOPS_OIDC_SCOPES", "").strip()
        or "openid profile email",
        # client_secret_basic is the token endpoint's default method in OpenID Connect.
        "OIDC_TOKEN_USE_BASIC_AUTH": env_choice(
            "AGENTOPS_OIDC_TOKEN_AUTH", "basic", ("basic", "post")
        )
        == "basic",
        "OIDC_TIMEOUT": env_float("AGENTOPS_OIDC_TIMEOUT_SECONDS", 10.0),
        "OIDC_USE_PKCE": True,
        "OIDC_USE_NONCE": True,
        # The ID token is the hint of the provider's sign-out (agentops.oidc.provider_sign_out_url).
        "OIDC_STORE_ID_TOKEN": True,
    }


def sign_out_form_action(config: dict[str, Any] | None) -> list[str]:
    """The origin of the provider's end-session endpoint, for the Content-Security-Policy's
    form-action: sign-out is a form posting to /logout/, which redirects there, and browsers
    hold a form's redirects to form-action too (Chromium blocks the redirect otherwise, and the
    provider's session stays open). [] without an end-session endpoint."""
    endpoint = (config or {}).get("END_SESSION_ENDPOINT") or ""
    parts = urlsplit(endpoint)
    return [f"{parts.scheme}://{parts.netloc}"] if parts.scheme and parts.netloc else []


def product_settings() -> dict[str, Any]:
    """`AGENTOPS["LOCAL_PASSWORDS"]` and `AGENTOPS["OIDC"]` (None when single sign-on is off)."""
    enabled = oidc_enabled()
    local_passwords = env_bool("AGENTOPS_LOCAL_PASSWORDS", True)
    if not enabled and not local_passwords:
        refuse(
            "AGENTOPS_LOCAL_PASSWORDS", "is false, but single sign-on is off: nobody could sign in"
        )
    config = None
    if enabled:
        config = {
            "ISSUER": oidc_url("AGENTOPS_OIDC_ISSUER"),
            "END_SESSION_ENDPOINT": oidc_url("AGENTOPS_OIDC_END_SESSION_ENDPOINT"),
            "PROVIDER_NAME": os.environ.get("AGENTOPS_OIDC_PROVIDER_NAME", "").strip(),
            "USERNAME_CLAIM": os.environ.get("AGENTOPS_OIDC_USERNAME_CLAIM", "").strip()
            or "preferred_username",
            "GROUPS_CLAIM": os.environ.get("AGENTOPS_OIDC_GROUPS_CLAIM", "").strip() or "groups",
            "GROUPS_MAP": groups_map("AGENTOPS_OIDC_GROUPS_MAP"),
        }
    return {"LOCAL_PASSWORDS": local_passwords, "OIDC": config}
