"""The sign-in forms (the product's and the admin's) with guessing throttled.

Before a password is checked, the account from this client address and the address itself must
be out of lockout; a wrong password counts against both; a right one clears the account's count
from this address (never the address's: a guesser holding one account of their own could
otherwise reset their address between guesses). A locked-out attempt is refused without checking
the password at all, so a lockout holds even against the right one; it holds at that address
only, so the account's owner signs in from their own while someone else guesses. The page (the
product's and the admin's) answers 429 with Retry-After and says when to try again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse

from agentops.plumbing import throttle


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
            raise ValidationError(
                "Too many failed sign-in attempts. Try again in %(wait)s.",
                code="throttled",
                params={"wait": throttle.minutes_text(seconds)},
            )


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


class LoginView(auth_views.LoginView):
    form_class = LoginForm

    def form_invalid(self, form: Any) -> HttpResponse:
        return throttled_answer(super().form_invalid(form), form)


def admin_login(site_login: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The admin site's `login` view, answering a locked-out attempt as `LoginView` does."""

    @functools.wraps(site_login)
    def login(request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        response = site_login(request, extra_context)
        context = getattr(response, "context_data", None) or {}
        return throttled_answer(response, context.get("form"))

    return login
