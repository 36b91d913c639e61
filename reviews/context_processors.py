"""The review counts in the navigation: what waits for the signed-in person, by role.

Everything is lazy: the role query and the counts run only when a template reads them, so a
fragment that does not render the navigation costs nothing here.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.http import HttpRequest

from reviews.permissions import (
    can_read_dashboard,
    can_read_decisions,
    can_read_reviews,
    is_auditor,
    is_operator,
    is_policy_admin,
)
from reviews.selectors import audit_pending_count, inbox_counts


class ReviewNav:
    def __init__(self, user: Any) -> None:
        self.user = user

    @cached_property
    def is_operator(self) -> bool:
        return is_operator(self.user)

    @cached_property
    def is_auditor(self) -> bool:
        return is_auditor(self.user)

    @cached_property
    def is_policy_admin(self) -> bool:
        return is_policy_admin(self.user)

    @cached_property
    def can_read(self) -> bool:
        return can_read_reviews(self.user)

    @cached_property
    def can_read_log(self) -> bool:
        return can_read_decisions(self.user)

    @cached_property
    def can_read_dashboard(self) -> bool:
        return can_read_dashboard(self.user)

    @cached_property
    def inbox_count(self) -> int:
        gates, stopped = inbox_counts()
        return gates + stopped

    @cached_property
    def audit_count(self) -> int:
        return audit_pending_count()


def review_nav(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"review_nav": ReviewNav(user)}
