"""Start again and fork from a step, from the task page: thin views over
`reviews.services.task_restart_apply` / `task_fork_apply`; on success, the new task's page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agentops.models import Task
from agentops.plumbing.web import AuthenticatedHttpRequest
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


def _refused(request: AuthenticatedHttpRequest, task_id: int, why: str) -> HttpResponse:
    messages.error(request, f"Nothing was started: {why}")
    return redirect(reverse("agentops:task_detail", args=[task_id]) + "#again")


def _errors(form: RestartForm | ForkForm) -> str:
    return "; ".join(
        f"{name}: {' '.join(map(str, errors))}" for name, errors in form.errors.items()
    )


# The success message: (the old task's id, the new task, the form's fields) -> the text.
Message = Callable[[int, Task, dict[str, Any]], str]


def _start(
    request: AuthenticatedHttpRequest,
    task_id: int,
    form: RestartForm | ForkForm,
    apply: Callable[..., Task],
    message: Message,
) -> HttpResponse:
    """Validate `form`, call `apply` (a service taking the form's fields as keywords), and on
    success say `message` and go to the new task's page; a refusal goes back to the task page
    with the reason."""
    if not form.is_valid():
        return _refused(request, task_id, _errors(form))
    try:
        new = apply(task_id=task_id, actor=request.user, via=VIA_BROWSER, **form.cleaned_data)
    except ReviewError as exc:
        return _refused(request, task_id, str(exc))
    messages.success(request, message(task_id, new, form.cleaned_data))
    return redirect("agentops:task_detail", task_id=new.pk)


def _restarted(task_id: int, new: Task, fields: dict[str, Any]) -> str:
    return f"Started again as task {new.pk} (task {task_id} links to it)."


def _forked(task_id: int, new: Task, fields: dict[str, Any]) -> str:
    return f"Forked from step {fields['from_step'] + 1} as task {new.pk}."


@operator_required
@require_POST
def task_restart_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = RestartForm(request.POST, endings=restart_endings(_task_or_404(task_id)))
    return _start(request, task_id, form, task_restart_apply, _restarted)


@operator_required
@require_POST
def task_fork_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = ForkForm(request.POST, points=fork_choices(_task_or_404(task_id)))
    return _start(request, task_id, form, task_fork_apply, _forked)
