"""Start again and fork from a step, from the task page: thin views over
`reviews.services.task_restart_apply` / `task_fork_apply`; on success, the new task's page."""

from __future__ import annotations

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


@operator_required
@require_POST
def task_restart_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    task = _task_or_404(task_id)
    form = RestartForm(request.POST, endings=restart_endings(task))
    if not form.is_valid():
        return _refused(request, task_id, _errors(form))
    try:
        new = task_restart_apply(
            task_id=task_id,
            actor=request.user,
            ending=form.cleaned_data["ending"],
            input=form.cleaned_data["input"],
            reason=form.cleaned_data["reason"],
            via=VIA_BROWSER,
        )
    except ReviewError as exc:
        return _refused(request, task_id, str(exc))
    messages.success(request, f"Started again as task {new.pk} (task {task_id} links to it).")
    return redirect("agentops:task_detail", task_id=new.pk)


@operator_required
@require_POST
def task_fork_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    task = _task_or_404(task_id)
    form = ForkForm(request.POST, points=fork_choices(task))
    if not form.is_valid():
        return _refused(request, task_id, _errors(form))
    try:
        new = task_fork_apply(
            task_id=task_id,
            actor=request.user,
            from_step=form.cleaned_data["from_step"],
            input=form.cleaned_data["input"],
            reason=form.cleaned_data["reason"],
            via=VIA_BROWSER,
        )
    except ReviewError as exc:
        return _refused(request, task_id, str(exc))
    step = form.cleaned_data["from_step"] + 1
    messages.success(request, f"Forked from step {step} as task {new.pk}.")
    return redirect("agentops:task_detail", task_id=new.pk)
