"""Who may edit and publish policies: one helper, checked by every editor view on the server.

A policy admin is an active user holding `policies.publish_policyversion`, directly or through
the "policy admins" group (created by a data migration); superusers hold every permission.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

ADMIN_GROUP = "policy admins"
PUBLISH_PERMISSION = "policies.publish_policyversion"


def is_policy_admin(user: Any) -> bool:
    return bool(
        user is not None
        and user.is_authenticated
        and user.is_active
        and user.has_perm(PUBLISH_PERMISSION)
    )


def policy_admin_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous users go to the login page; signed-in users who are not policy admins get 403."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not is_policy_admin(request.user):
            raise PermissionDenied("only policy admins may view or change policies")
        return view(request, *args, **kwargs)

    return wrapped
