"""The scope-grants section of the task page (registered in `ReviewsConfig.ready()`): the grants
that concern the task (its own and its agent's), each in force, expired or revoked, who granted it,
until when and why, with a revoke form for holders of "grant scopes". Readers of the review
workspace see it; the section is empty when there is no grant.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.template.loader import render_to_string

from agentops.models import Task
from agentops.permissions import GRANT_SCOPES
from reviews.forms import ScopeRevokeForm
from reviews.selectors import scope_grants_for_task


def task_grants_section(request: HttpRequest, task: Task) -> str:
    """The section's HTML for `request.user` ("" for a reader who may not see it, or no grant)."""
    user = getattr(request, "user", None)
    if user is None or not (user.has_perm("reviews.read_reviews") or user.has_perm(GRANT_SCOPES)):
        return ""
    grants = scope_grants_for_task(task=task)
    if not grants:
        return ""
    context = {
        "task": task,
        "grants": grants,
        "can_revoke": user.has_perm(GRANT_SCOPES),
        "revoke_form": ScopeRevokeForm(auto_id=False),
    }
    return render_to_string("reviews/_partials/task_grants.html", context, request=request)
