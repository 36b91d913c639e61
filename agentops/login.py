"""The sign-in forms (the product's and the admin's) with guessing throttled.

Before a password is checked, the account from this client address and the address itself must
be out of lockout; a wrong password counts against both; a right one clears the account's count
from this address (never the address's: a guesser holding one account of their own could
otherwise reset their address between guesses). A locked-out attempt is refused without checking
the password at all, so a lockout holds even against the right one; it holds at that address
only, so the account's owner signs in from their own while someone else guesses. The page (the
product's and the admin's) answers 429 with Retry-After and says when to try again.

With single sign-on (agentops.oidc) the page offers the identity provider too, and these are its
views: the way there, the callback and sign-out. A callback of a sign-in this session started
(its state issued here) that signs nobody in counts as a failed sign-in from its client address
(the address scope the password form counts in), so a guesser of codes meets the same lockout; a
provider that does not answer is not counted. A callback with a state this session was not given
is refused without counting: it reaches no provider, and any web page can make a browser send
one (an image), which would otherwise lock a whole office's address out of signing in. With
local passwords turned off (AGENTOPS_LOCAL_PASSWORDS=false) the page offers only the provider,
and a password posted to it or to the admin's sign-in is refused (403).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, cast

import requests
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from agentops.oidc import (
    REFUSAL,
    library_setting,
    local_passwords,
    oidc_config,
    provider_sign_out_url,
)
from agentops.plumbing import throttle

logger = logging.getLogger(__name__)


class ThrottledLoginMixin:
    """For an AuthenticationForm: refuse while locked out, count failures, clear on success."""

    request: Any
    cleaned_data: dict[str, Any]
    user_cache: Any
    retry_after: int = 0

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        if not username or not self.cleaned_data.get("password"):
            # A missing field is no guess. (`misc`: the form class after this mixin has `clean`.)
            incomplete: dict[str, Any] = super().clean()  # type: ignore[misc]
            return incomplete
        client = throttle.client_address(self.request) if self.request else ""
        account = throttle.account_key(username, client)
        keys = [account, throttle.address_key(throttle.Scope.LOGIN_ADDRESS, client)]
        self._refuse_if_locked(throttle.throttle_wait(keys))
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]  # as above
        except ValidationError:
            if self.user_cache is None:  # the credentials were wrong, not e.g. a non-staff user
                self._refuse_if_locked(
                    throttle.throttle_fail(keys, client=client, username=username)
                )
            raise
        throttle.throttle_forget([account])
        return cleaned

    def _refuse_if_locked(self, seconds: int) -> None:
        if seconds:
            self.retry_after = seconds
            raise ValidationError(throttled_text(seconds), code="throttled")


def throttled_text(seconds: int) -> str:
    return _("Too many failed sign-in attempts. Try again in %(wait)s.") % {
        "wait": throttle.minutes_text(seconds)
    }


class LoginForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class AdminLoginForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass


def throttled_answer(response: HttpResponse, form: Any) -> HttpResponse:
    """`response` as 429 with Retry-After when `form` refused a locked-out attempt."""
    if getattr(form, "retry_after", 0):
        response.status_code = 429
        response["Retry-After"] = str(form.retry_after)
    return response


def passwords_off_text() -> str:
    return _("Passwords are turned off here: sign in with your identity provider.")


def sign_in_context(request: HttpRequest) -> dict[str, Any]:
    """What the sign-in page offers: the provider's button, the password form, or both."""
    config = oidc_config()
    return {
        "oidc_enabled": config is not None,
        "provider_name": (config or {}).get("PROVIDER_NAME", ""),
        "local_passwords": local_passwords(),
    }


def sign_in_page(
    request: HttpRequest, *, error: str, status: int, retry_after: int = 0
) -> HttpResponse:
    """The sign-in page saying why the last attempt did not sign anyone in."""
    context = {
        **sign_in_context(request),
        "form": LoginForm(request),
        "next": request.session.get("oidc_login_next") or "",
        "sign_in_error": error,
    }
    response = TemplateResponse(request, "registration/login.html", context, status=status)
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response


class LoginView(auth_views.LoginView):
    form_class = LoginForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        return {**context, **sign_in_context(self.request)}

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not local_passwords():
            return sign_in_page(request, error=passwords_off_text(), status=403)
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response

    def form_invalid(self, form: Any) -> HttpResponse:
        return throttled_answer(super().form_invalid(form), form)


def admin_login(site_login: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The admin site's `login` view, answering a locked-out attempt as `LoginView` does, and
    giving way to the product's sign-in page while local passwords are off."""

    @functools.wraps(site_login)
    def login(request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not local_passwords():
            return cast(HttpResponse, LoginView.as_view()(request))
        response = site_login(request, extra_context)
        context = getattr(response, "context_data", None) or {}
        return throttled_answer(response, context.get("form"))

    return login


class LogoutView(auth_views.LogoutView):
    """Sign-out: the session here ends, then, for a person who signed in at the identity
    provider, its session too (RP-initiated logout) when it has an end-session endpoint."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        at_provider = provider_sign_out_url(request)
        response: HttpResponse = super().post(request, *args, **kwargs)
        return HttpResponseRedirect(at_provider) if at_provider else response


class ProviderSignInView(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Off to the provider, with a state, a nonce and a PKCE challenge (404 while single
    sign-on is off)."""

    def __init__(self, **kwargs: Any) -> None:
        # The library's reads its settings here, which exist only while single sign-on is on.
        View.__init__(self, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        if oidc_config() is None:
            raise Http404
        self.OIDC_OP_AUTH_ENDPOINT = library_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        self.OIDC_RP_CLIENT_ID = library_setting("OIDC_RP_CLIENT_ID")
        response: HttpResponse = super().get(request)
        return response


class ProviderCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """Back from the provider: signed in, or the sign-in page saying why not (a failure counted
    against the client address, 429 once it is locked out)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if oidc_config() is None:
            raise Http404
        self.client = throttle.client_address(request)
        self.keys = [throttle.address_key(throttle.Scope.LOGIN_ADDRESS, self.client)]
        if wait := throttle.throttle_wait(self.keys):
            return sign_in_page(request, error=throttled_text(wait), status=429, retry_after=wait)
        if request.GET.get("state") not in request.session.get("oidc_states", {}):
            # Not a sign-in this browser started here: refused before the library sees it (which
            # would sign out whoever is signed in on an `error`), and not counted.
            logger.warning("agentops.oidc.refused: a state this session was not given")
            return sign_in_page(request, error=sign_in_failed_text(), status=403)
        try:
            response: HttpResponse = super().get(request)
        except SuspiciousOperation as error:  # a state not issued here, a token that fails
            logger.warning("agentops.oidc.refused: %s", error)
            return self.login_failure()
        except requests.HTTPError as error:  # the token endpoint refused the code
            status = error.response.status_code if error.response is not None else None
            logger.warning("agentops.oidc.refused: the token endpoint answered %s", status)
            return self.login_failure()
        except requests.RequestException as error:
            logger.error("agentops.oidc.unreachable: %s", error.__class__.__name__)
            return sign_in_page(
                request,
                error=_("The identity provider did not answer. Try again in a moment."),
                status=502,
            )
        return response

    def login_failure(self) -> HttpResponse:
        request = self.request
        seconds = throttle.throttle_fail(self.keys, client=self.client)
        if seconds:
            return sign_in_page(
                request, error=throttled_text(seconds), status=429, retry_after=seconds
            )
        error = getattr(request, REFUSAL, None) or sign_in_failed_text()
        return sign_in_page(request, error=error, status=403)


def sign_in_failed_text() -> str:
    return _("Signing in with the identity provider failed. Try again.")
