"""The review counts in the navigation: what waits for the signed-in person.

Which links the navigation shows is asked of Django's permissions (`{% if perms.reviews... %}`,
registered in `reviews.roles`); this only adds the counts. Everything is lazy: the counts run only
when a template reads them, so a fragment that does not render the navigation costs nothing here.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.http import HttpRequest

from reviews.selectors import audit_pending_count, inbox_counts


class ReviewNav:
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
    return {"review_nav": ReviewNav()}
