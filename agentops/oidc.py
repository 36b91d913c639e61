"""Single sign-on with an OpenID Connect provider, through mozilla-django-oidc.

The flow (the authorization code flow with PKCE): /oidc/authenticate/ sends the person to the
provider with a state, a nonce and a PKCE challenge kept in their session; the provider sends
them back to /oidc/callback/ with a code, which the product exchanges at the token endpoint (with
its client secret and the PKCE verifier). The ID token is then checked here and by the library:
its signature against the provider's published keys (its JWKS), its issuer, audience, expiry and
nonce; the userinfo endpoint's claims (for the same `sub`) create or update the user
(`provider_sign_in`). People are matched by the provider's `sub` at its issuer
(`ProviderIdentity`), never by email or username.

Roles follow the provider's groups: the product groups named in AGENTOPS_OIDC_GROUPS_MAP belong to
the provider, and each sign-in sets them from the groups claim (a group taken away at the provider
is lost at the next sign-in); every other group (approver groups, roles given with `manage.py
roles` that the map does not name) is left as it is. A deactivated user is refused.

The views (the way to the provider, the callback, sign-out) are agentops.login's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from agentops.models import ProviderIdentity

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

# Django's own username rule (letters, digits and @.+-_), and its length.
USERNAME_NOT_ALLOWED = re.compile(r"[^\w.@+-]")
USERNAME_MAX = 150
# Where the backend leaves why it refused someone the provider signed in (the callback shows it).
REFUSAL = "_agentops_sign_in_refusal"
# What the library's callback view passes to `authenticate` beside the request, and no password
# form does.
CALLBACK_CREDENTIALS = frozenset({"nonce", "code_verifier"})


def oidc_config() -> dict[str, Any] | None:
    """`AGENTOPS["OIDC"]` (agentops.oidc_env), or None when single sign-on is off."""
    config: dict[str, Any] | None = settings.AGENTOPS.get("OIDC")
    return config


# How far the provider's clock may be from ours when its ID token's times are checked.
CLOCK_SKEW_SECONDS = 60


def authorized_party_holds(claims: Mapping[str, Any], client_id: str) -> bool:
    """OpenID Connect Core 3.1.3.7, steps 4-5: a token for several audiences must name this
    client as its authorized party (`azp`), and any `azp` it names must be this client."""
    audiences = claims.get("aud")
    several = isinstance(audiences, list) and len(audiences) > 1
    if several or "azp" in claims:
        return claims.get("azp") == client_id
    return True


def library_setting(name: str) -> str:
    """One of mozilla-django-oidc's settings (`OIDC_*`), which exist while single sign-on is on
    (agentops.oidc_env.library_settings)."""
    return str(getattr(settings, name))


def local_passwords() -> bool:
    """Whether a local username and password still sign in (AGENTOPS_LOCAL_PASSWORDS)."""
    return bool(settings.AGENTOPS.get("LOCAL_PASSWORDS", True))


class ProviderBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """The library's backend, matching people by `sub` and checking the whole ID token. It
    answers no permission question: the role backends do (reviews.roles)."""

    def authenticate(self, request: HttpRequest | None, **credentials: Any) -> User | None:
        """The library's sign-in, for the callback only: Django asks every backend whatever
        credentials it is given, and the library's would take a `code` from any request's query
        (a password posted to /login/?code=...&state=...), exchanging it at the token endpoint
        without this session's PKCE verifier or nonce. The callback passes both (None when the
        session had none, which the provider and the nonce check then refuse)."""
        if CALLBACK_CREDENTIALS - credentials.keys():
            return None
        user: User | None = super().authenticate(request, **credentials)
        return user

    def get_payload_data(self, token: str | bytes, key: Any) -> dict[str, Any]:
        """The ID token's claims, once its signature, issuer, audience, authorized party and
        expiry hold (the library checks the signature only; unsigned tokens are never taken).
        The times allow CLOCK_SKEW_SECONDS either way: a provider's clock a little ahead of ours
        must not refuse every sign-in."""
        config = oidc_config() or {}
        try:
            algorithm = jwt.get_unverified_header(token).get("alg")
            if algorithm != self.OIDC_RP_SIGN_ALGO:
                raise SuspiciousOperation(f"ID token signed with {algorithm!r}")
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=config.get("ISSUER"),
                options={"require": ["iss", "sub", "aud", "exp", "iat"]},
                leeway=CLOCK_SKEW_SECONDS,
            )
        except jwt.PyJWTError as error:
            raise SuspiciousOperation(f"ID token refused: {error.__class__.__name__}") from error
        if not authorized_party_holds(claims, self.OIDC_RP_CLIENT_ID):
            raise SuspiciousOperation("ID token refused: issued to another party (azp)")
        return claims

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        try:
            payload: dict[str, Any] = super().verify_token(token, **kwargs)
        except (KeyError, ValueError, jwt.PyJWTError) as error:  # no key id, not a JWT at all
            raise SuspiciousOperation(f"ID token refused: {error.__class__.__name__}") from error
        return payload

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> User | None:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo's sub is not the ID token's")
        user = provider_sign_in(issuer=str(payload["iss"]), claims={**payload, **userinfo})
        if user is None:
            setattr(
                self.request,
                REFUSAL,
                _("Your account here is deactivated. Ask an operator to reactivate it."),
            )
        return user

    def get_user(self, user_id: Any) -> User | None:
        """The user of a request signed in here; None once they are deactivated (the library's
        own answer would keep them signed in)."""
        user: User | None = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return False

    def has_module_perms(self, user_obj: Any, app_label: str) -> bool:
        return False

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return set()


@transaction.atomic
def provider_sign_in(*, issuer: str, claims: Mapping[str, Any]) -> User | None:
    """The user the provider knows as `claims["sub"]` at `issuer`, created on their first sign-in
    and brought up to date on every one (username, name, email, the provider's groups); None,
    with nothing changed, when that user is deactivated."""
    subject = str(claims["sub"])
    identity = (
        ProviderIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    now = timezone.now()
    if identity is None:
        user = get_user_model().objects.create_user(username=_username_free(claims, None))
        identity = ProviderIdentity.objects.create(
            user=user, issuer=issuer, subject=subject, last_sign_in_at=now
        )
        logger.info(
            "agentops.oidc.user_created",
            extra={"username": user.username, "issuer": issuer, "subject": subject},
        )
    else:
        user = identity.user
        if not user.is_active:
            logger.warning(
                "agentops.oidc.refused: the user is deactivated",
                extra={"username": user.username, "issuer": issuer, "subject": subject},
            )
            return None
        identity.last_sign_in_at = now
        identity.save(update_fields=["last_sign_in_at"])
    _user_update(user, claims)
    _groups_sync(user, claims)
    return user


def _username_free(claims: Mapping[str, Any], user: User | None) -> str:
    """The username claim made a valid Django username, with -2, -3, ... when another user holds
    it in any case (`Admin` is not free beside a local `admin`: the record and the pages show
    usernames, and one must not pass for another); the user's own username counts as free."""
    config = oidc_config() or {}
    wanted = USERNAME_NOT_ALLOWED.sub("", str(claims.get(config.get("USERNAME_CLAIM", "")) or ""))
    base = wanted[: USERNAME_MAX - 8] or f"user-{str(claims['sub'])[:40]}"
    base = USERNAME_NOT_ALLOWED.sub("", base)
    others = get_user_model().objects.all()
    if user is not None:
        others = others.exclude(pk=user.pk)
    candidate, number = base, 1
    while others.filter(username__iexact=candidate).exists():
        number += 1
        candidate = f"{base}-{number}"
    return candidate


def _user_update(user: User, claims: Mapping[str, Any]) -> None:
    values = {
        "username": _username_free(claims, user),
        "email": str(claims.get("email") or "")[:254],
        "first_name": str(claims.get("given_name") or "")[:150],
        "last_name": str(claims.get("family_name") or "")[:150],
        "last_login": timezone.now(),
    }
    changed = [name for name, value in values.items() if getattr(user, name) != value]
    for name in changed:
        setattr(user, name, values[name])
    if changed:
        user.save(update_fields=changed)


def _groups_sync(user: User, claims: Mapping[str, Any]) -> None:
    """The product groups the map names, set from the provider's groups claim; others kept."""
    config = oidc_config() or {}
    mapping: dict[str, list[str]] = config.get("GROUPS_MAP") or {}
    owned = {name for names in mapping.values() for name in names}
    if not owned:
        return
    held = claims.get(config.get("GROUPS_CLAIM", "groups"))
    at_provider = {held} if isinstance(held, str) else {str(group) for group in held or ()}
    wanted = {name for group in at_provider for name in mapping.get(group, ())}
    groups = {group.name: group for group in Group.objects.filter(name__in=owned)}
    if missing := owned - groups.keys():
        logger.error(
            "agentops.oidc.groups_missing: AGENTOPS_OIDC_GROUPS_MAP names groups that do not exist",
            extra={"groups": sorted(missing)},
        )
    current = set(user.groups.filter(name__in=owned).values_list("name", flat=True))
    join = sorted((wanted - current) & groups.keys())
    leave = sorted(current - wanted)
    if join or leave:
        user.groups.add(*(groups[name] for name in join))
        user.groups.remove(*(groups[name] for name in leave))
        logger.info(
            "agentops.oidc.groups_changed",
            extra={"username": user.username, "joined": join, "left": leave},
        )


def provider_sign_out_url(request: HttpRequest) -> str | None:
    """Where the provider ends its own session (RP-initiated logout), back to the sign-in page
    after: for a person who signed in there, when the provider has an end-session endpoint."""
    config = oidc_config()
    id_token = request.session.get("oidc_id_token")
    if not config or not config["END_SESSION_ENDPOINT"] or not id_token:
        return None
    query = urlencode(
        {
            "id_token_hint": id_token,
            "client_id": library_setting("OIDC_RP_CLIENT_ID"),
            "post_logout_redirect_uri": request.build_absolute_uri(reverse("login")),
        }
    )
    endpoint: str = config["END_SESSION_ENDPOINT"]
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"
