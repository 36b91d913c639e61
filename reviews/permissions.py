"""Who may do what in the review workspace: role helpers and the view decorators that use them.

A role is membership of one of the groups the migrations create (`operators`, `auditors`,
`policy admins`); a superuser holds every role. The group names are read in one query and cached
on the user object, so a page asks at most once however many checks it makes. Every view checks
on the server: anonymous users go to the login page, signed-in users without the role get 403.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django_htmx.http import HttpResponseClientRedirect

from reviews.states import Role

_CACHE = "_reviews_roles"
ALL_ROLES = frozenset(Role.values)


def roles_of(user: Any) -> frozenset[str]:
    """The roles `user` holds (empty for anonymous or inactive users)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return frozenset()
    cached = getattr(user, _CACHE, None)
    if cached is None:
        if user.is_superuser:
            cached = ALL_ROLES
        else:
            cached = frozenset(
                user.groups.filter(name__in=ALL_ROLES).values_list("name", flat=True)
            )
        setattr(user, _CACHE, cached)
    return cached


def is_operator(user: Any) -> bool:
    return Role.OPERATORS in roles_of(user)


def is_auditor(user: Any) -> bool:
    return Role.AUDITORS in roles_of(user)


def is_policy_admin(user: Any) -> bool:
    return Role.POLICY_ADMINS in roles_of(user)


def can_read_reviews(user: Any) -> bool:
    """Operators and auditors read the inbox, the panels and the audit queue."""
    return bool(roles_of(user) & {Role.OPERATORS, Role.AUDITORS})


def can_read_decisions(user: Any) -> bool:
    """The decision log is read by every role."""
    return bool(roles_of(user))


def can_read_dashboard(user: Any) -> bool:
    """The oversight dashboard is read by operators, auditors and policy admins."""
    return bool(roles_of(user))


def role_required(
    check: Callable[[Any], bool], *, refusal: str
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Decorate a view: anonymous users are sent to log in (htmx: the whole page, through
    HX-Redirect); others must pass `check` (else 403)."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                login = redirect_to_login(request.get_full_path())
                if getattr(request, "htmx", False):
                    # A polled fragment must not swap the login page into a table.
                    return HttpResponseClientRedirect(login.url)
                return login
            if not check(request.user):
                raise PermissionDenied(refusal)
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


operator_required = role_required(is_operator, refusal="only operators may do this")
auditor_required = role_required(is_auditor, refusal="only auditors may review audit items")
reader_required = role_required(
    can_read_reviews, refusal="only operators and auditors may see the review workspace"
)
log_reader_required = role_required(
    can_read_decisions, refusal="only operators, auditors and policy admins may read the log"
)
# Pages about one's own account: any signed-in person.
signed_in_required = role_required(lambda user: True, refusal="sign in first")
dashboard_required = role_required(
    can_read_dashboard, refusal="only operators, auditors and policy admins may see the dashboard"
)
policy_admin_required = role_required(
    is_policy_admin, refusal="only policy admins may open policy drafts"
)
