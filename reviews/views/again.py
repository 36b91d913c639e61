"""Start again and fork from a step, from the task page: thin views over
`reviews.services.task_restart_apply` / `task_fork_apply`; on success, the new task's page."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agentops.models import Task
from agentops.web import AuthenticatedHttpRequest
from reviews.again_forms import ForkForm, RestartForm
from reviews.services import ReviewError, task_fork_apply, task_restart_apply
from reviews.states import VIA_BROWSER
from reviews.task_again import fork_choices, restart_endings
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


def _start(
    request: AuthenticatedHttpRequest,
    task_id: int,
    form: RestartForm | ForkForm,
    apply: Callable[..., Task],
    message: Callable[[Task], str],
) -> HttpResponse:
    """Validate `form`, call `apply` (a service taking the form's fields as keywords), and on
    success say `message(new task)` and go to the new task's page; a refusal goes back to the
    task page with the reason."""
    if not form.is_valid():
        return _refused(request, task_id, _errors(form))
    try:
        new = apply(task_id=task_id, actor=request.user, via=VIA_BROWSER, **form.cleaned_data)
    except ReviewError as exc:
        return _refused(request, task_id, str(exc))
    messages.success(request, message(new))
    return redirect("agentops:task_detail", task_id=new.pk)


@operator_required
@require_POST
def task_restart_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = RestartForm(request.POST, endings=restart_endings(_task_or_404(task_id)))
    return _start(
        request,
        task_id,
        form,
        task_restart_apply,
        lambda new: f"Started again as task {new.pk} (task {task_id} links to it).",
    )


@operator_required
@require_POST
def task_fork_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = ForkForm(request.POST, points=fork_choices(_task_or_404(task_id)))
    return _start(
        request,
        task_id,
        form,
        task_fork_apply,
        lambda new: f"Forked from step {form.cleaned_data['from_step'] + 1} as task {new.pk}.",
    )
