"""Scope grants from the browser: grant the scope a service refused (on the recovery panel) and
revoke a grant (on the task page). POST only, with CSRF; the service checks the person again
(the "grant scopes" permission, not the task's starter, the claim), so a forged request gets what
the page would have refused.
"""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from agentops.models import ScopeGrant, Task
from agentops.permissions import GRANT_SCOPES
from agentops.plumbing.web import AuthenticatedHttpRequest, permission_required
from reviews.forms import ScopeGrantForm, ScopeRevokeForm
from reviews.selectors import grants_visible_to
from reviews.services import (
    NotAllowed,
    ReviewError,
    scope_grant_apply,
    scope_grant_revoke_apply,
)
from reviews.states import VIA_BROWSER
from reviews.views._common import back_or_default
from reviews.views.recovery import recovery_attempt, render_recovery
from reviews.wording import with_kept

granter_required = permission_required(
    GRANT_SCOPES, refusal=cast(str, gettext_lazy("only scope granters may grant or revoke scopes"))
)


@granter_required
@require_POST
def scope_grant_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = ScopeGrantForm(request.POST, auto_id="grant_%s")
    if not form.is_valid():
        return render_recovery(request, task_id, grant_form=form, status=400)
    data = form.cleaned_data
    grant = recovery_attempt(
        request,
        task_id,
        lambda: scope_grant_apply(
            task_id=task_id,
            scope=data["scope"],
            minutes=data["minutes"],
            to_agent=data["to"] == "agent",
            actor=request.user,
            reason=data["reason"],
            take_over=data["take_over"],
            via=VIA_BROWSER,
        ),
        not_found=Task.DoesNotExist,
        missing=f"no task {task_id}",
        kept={"grant_form": form},
    )
    if isinstance(grant, HttpResponse):
        return grant
    if grant.task_id:
        granted = _(
            "Task #%(id)s: %(scope)s granted to this task until %(until)s UTC; the step "
            "continues under it."
        )
    else:
        granted = _(
            "Task #%(id)s: %(scope)s granted to every %(agent)s task until %(until)s UTC; the "
            "step continues under it."
        )
    messages.success(
        request,
        with_kept(
            granted,
            id=task_id,
            scope=grant.scope,
            agent=grant.agent,
            until=f"{grant.expires_at:%Y-%m-%d %H:%M}",
        ),
    )
    return redirect("agentops:task_detail", task_id=task_id)


@granter_required
@require_POST
def scope_revoke_view(request: AuthenticatedHttpRequest, grant_id: int) -> HttpResponse:
    grant = grants_visible_to(request.user).filter(pk=grant_id).first()
    if grant is None:
        raise Http404(f"no grant {grant_id}")
    back = _back_path(grant)
    form = ScopeRevokeForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Nothing was revoked: say why the grant is revoked."))
        return back_or_default(request, back)
    try:
        scope_grant_revoke_apply(
            grant_id=grant_id,
            actor=request.user,
            reason=form.cleaned_data["reason"],
            via=VIA_BROWSER,
        )
    except NotAllowed as exc:
        messages.error(request, str(exc))
        return back_or_default(request, back)
    except ReviewError as exc:
        messages.error(request, _("Nothing was revoked: %(why)s") % {"why": exc})
        return back_or_default(request, back)
    messages.success(
        request, with_kept(_("Grant #%(id)s (%(scope)s) revoked."), id=grant_id, scope=grant.scope)
    )
    return back_or_default(request, back)


def _back_path(grant: ScopeGrant) -> str:
    if grant.task_id is not None:
        return reverse("agentops:task_detail", args=[grant.task_id])
    return reverse("reviews:inbox")
