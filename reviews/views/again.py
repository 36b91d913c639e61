"""Start again and fork from a step, from the task page (and start again from the recovery
panel): thin views over `reviews.services.task_restart_apply` / `task_fork_apply`; on success,
the new task's page; on invalid input or a refusal, the form again with the reason and what was
typed (in place for htmx, else on a page of its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from agentops.models import Task
from agentops.plumbing.web import AuthenticatedHttpRequest, varying
from reviews.again_page import fork_choices, restart_endings
from reviews.forms import ForkForm, RestartForm
from reviews.services import ReviewError, task_fork_apply, task_restart_apply
from reviews.states import VIA_BROWSER
from reviews.views._common import operator_required


def _task_or_404(task_id: int) -> Task:
    task = Task.objects.filter(pk=task_id).first()
    if task is None:
        raise Http404(f"no task {task_id}")
    return task


# The form each view answers with, in place (htmx) or on a page of its own: (the partial, the
# name the partial reads the form by, the page's heading).
RESTART = (
    "reviews/_partials/restart_form.html",
    "restart_form",
    gettext_noop("Start task #%(id)s again"),
)
FORK = (
    "reviews/_partials/fork_form.html",
    "fork_form",
    gettext_noop("Fork task #%(id)s from a step"),
)


def _form_again(
    request: AuthenticatedHttpRequest,
    task_id: int,
    form: RestartForm | ForkForm,
    shown: tuple[str, str, str],
) -> HttpResponse:
    """The form again, with the server's errors and what was typed: in place for htmx (200, which
    htmx swaps), or as a page of its own (400)."""
    template, name, heading = shown
    context = {"task": _task_or_404(task_id), name: form}
    if request.htmx:
        return varying(render(request, template, context))
    page = {**context, "form_template": template, "heading": _(heading) % {"id": task_id}}
    return varying(render(request, "reviews/again_form.html", page, status=400))


# The success message: (the old task's id, the new task, the form's fields) -> the text.
Message = Callable[[int, Task, dict[str, Any]], str]


def _start(
    request: AuthenticatedHttpRequest,
    task_id: int,
    form: RestartForm | ForkForm,
    apply: Callable[..., Task],
    message: Message,
    shown: tuple[str, str, str],
) -> HttpResponse:
    """Validate `form`, call `apply` (a service taking the form's fields as keywords), and on
    success say `message` and go to the new task's page; invalid input or a refusal answers with
    the form again, the reason in it (`_form_again`)."""
    if not form.is_valid():
        return _form_again(request, task_id, form, shown)
    try:
        new = apply(task_id=task_id, actor=request.user, via=VIA_BROWSER, **form.cleaned_data)
    except ReviewError as exc:
        form.add_error(None, str(exc))
        return _form_again(request, task_id, form, shown)
    messages.success(request, message(task_id, new, form.cleaned_data))
    url = reverse("agentops:task_detail", args=[new.pk])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _restarted(task_id: int, new: Task, fields: dict[str, Any]) -> str:
    return _("Started again as task %(new)s (task %(old)s links to it).") % {
        "new": new.pk,
        "old": task_id,
    }


def _forked(task_id: int, new: Task, fields: dict[str, Any]) -> str:
    return _("Forked from step %(step)s as task %(new)s.") % {
        "step": fields["from_step"] + 1,
        "new": new.pk,
    }


@operator_required
@require_POST
def task_restart_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = RestartForm(
        request.POST, endings=restart_endings(_task_or_404(task_id)), auto_id="restart_%s"
    )
    return _start(request, task_id, form, task_restart_apply, _restarted, RESTART)


@operator_required
@require_POST
def task_fork_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = ForkForm(request.POST, points=fork_choices(_task_or_404(task_id)), auto_id="fork_%s")
    return _start(request, task_id, form, task_fork_apply, _forked, FORK)
