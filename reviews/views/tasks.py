"""Operator controls on a task from its page: pause, resume, cancel, and modify."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from agentops.engine import TransitionRefused
from agentops.plumbing.web import AuthenticatedHttpRequest
from reviews.forms import TaskControlForm, TaskModifyForm
from reviews.services import ReviewError, task_control_apply, task_modify_apply
from reviews.states import VIA_BROWSER
from reviews.views._common import back_or_default, operator_required, task_or_404


@operator_required
@require_POST
def task_control(request: AuthenticatedHttpRequest, task_id: int, action: str) -> HttpResponse:
    """Pause, resume or cancel a task from the task page or the inbox; back to where it was
    asked (POST/redirect/GET), with what happened as a message."""
    task_or_404(task_id)
    form = TaskControlForm(request.POST)
    valid = form.is_valid()
    reason = form.cleaned_data.get("reason", "") if valid else ""
    if action == "cancel" and not (valid and form.cleaned_data["confirm"]):
        messages.error(
            request, _("Nothing changed: tick the box to confirm that the task ends now.")
        )
        return back_or_default(request, reverse("agentops:task_detail", args=[task_id]))
    try:
        task_control_apply(
            task_id=task_id, action=action, actor=request.user, reason=reason, via=VIA_BROWSER
        )
    except TransitionRefused as exc:
        messages.error(request, _("Nothing changed: %(why)s.") % {"why": exc.message})
    except ReviewError as exc:
        messages.error(request, str(exc))
    else:
        done = {
            "pause": _("Task #%(id)s paused."),
            "resume": _("Task #%(id)s resumed."),
            "cancel": _("Task #%(id)s cancelled."),
        }[action]
        messages.success(request, done % {"id": task_id})
    return back_or_default(request, reverse("agentops:task_detail", args=[task_id]))


@operator_required
@require_POST
def task_modify_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    task_or_404(task_id)
    form = TaskModifyForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
        messages.error(request, _("Nothing changed: %(why)s") % {"why": errors})
        return redirect("agentops:task_detail", task_id=task_id)
    try:
        changes = task_modify_apply(
            task_id=task_id,
            actor=request.user,
            via=VIA_BROWSER,
            budgets=form.budgets(),
            input_changes=form.cleaned_data["input"],
            reason=form.cleaned_data["reason"],
        )
    except TransitionRefused as exc:
        messages.error(request, _("Nothing changed: %(why)s.") % {"why": exc.message})
    except ReviewError as exc:
        messages.error(request, _("Nothing changed: %(why)s") % {"why": exc})
    else:
        if changes:
            messages.success(
                request,
                _("Task #%(id)s modified: %(changes)s.")
                % {"id": task_id, "changes": ", ".join(sorted(changes))},
            )
        else:
            messages.info(request, _("Nothing to change: the values are the same."))
    return redirect("agentops:task_detail", task_id=task_id)
