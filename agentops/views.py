"""The agentops pages: the task list, the start form, and the live task page.

Views are thin: parse with a form, read with a selector, write with one service. Each page also
serves its htmx fragment (a partial of the same template) from the same URL, through
`agentops.plumbing.web.render_page`. The polled task fragment answers 286 once the task is terminal,
which stops the polling. A poll whose fragment already shows the current version
(`task_list_version_read`, `task_detail_version_read`) gets an empty 204 instead
(`agentops.plumbing.web.poll_unchanged`). Starting a task needs `agentops.start_task` (the
task-starter role).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HTMX_STOP_POLLING, HttpResponseClientRedirect

from agentops import task_page
from agentops.engine import task_create
from agentops.engine.errors import AgentUnavailable, StartRefused, UnknownAgent
from agentops.forms import TaskFilterForm, TaskStartForm
from agentops.models import Task
from agentops.plumbing import prometheus
from agentops.plumbing.paging import window
from agentops.plumbing.web import (
    AuthenticatedHttpRequest,
    login_required,
    permission_required,
    poll_sent,
    poll_unchanged,
    render_page,
    wants_fragment,
)
from agentops.selectors import (
    archived_task_visible_to,
    artifact_get_visible,
    task_detail_version_read,
    task_earlier_work_get,
    task_get_detail,
    task_list_recent,
    task_list_version_read,
)

PAGE_SIZE = 50


@login_required
@require_GET
def task_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = TaskFilterForm(request.GET)
    status = form.cleaned_data["status"] if form.is_valid() else ""
    # Read before the rows (a change committed in between shows on the page and changes the
    # next poll's version); a poll that already shows it ends here.
    version = task_list_version_read(
        status=status or None, viewer=request.user, page=request.GET.get("page"), size=PAGE_SIZE
    )
    if poll_sent(request):
        unchanged = poll_unchanged(request, version)
        if unchanged is not None:
            return unchanged
    page = window(
        task_list_recent(status=status or None, viewer=request.user),
        page=request.GET.get("page"),
        size=PAGE_SIZE,
    )
    context: dict[str, Any] = {
        "form": form,
        "page": page,
        "status": status,
        "filter_query": urlencode({"status": status}) if status else "",
        "poll_version": version,
        # An empty list says whether there are tasks this role may not see (one query, if empty).
        "hidden_tasks": not page.object_list and not status and Task.objects.exists(),
    }
    return render_page(request, "agentops/task_list.html", context, fragment="task_table")


@permission_required("agentops.start_task", refusal=_("only task starters may start tasks"))
@require_http_methods(["GET", "POST"])
def task_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = TaskStartForm(request.POST)
        if form.is_valid():
            try:
                task = task_create(
                    agent=form.cleaned_data["agent"],
                    goal=form.cleaned_data["goal"],
                    input=form.cleaned_data["input"],
                    started_by=request.user,
                    token_budget=form.cleaned_data["token_budget"],
                    cost_budget=form.cleaned_data["cost_budget"],
                    wall_time_budget_seconds=form.cleaned_data["wall_time_budget_seconds"],
                )
            except (UnknownAgent, AgentUnavailable) as exc:
                form.add_error("agent", exc.message)
            except StartRefused as exc:
                raise PermissionDenied(exc.message) from None
            else:
                url = reverse("agentops:task_detail", args=[task.pk])
                if request.htmx:
                    return HttpResponseClientRedirect(url)
                return redirect(url)
    else:
        form = TaskStartForm()
    return render_page(request, "agentops/task_new.html", {"form": form}, fragment="task_form")


@login_required
@require_GET
def task_detail(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    # Read before the detail (a change committed in between shows on the page and changes
    # the next poll's version); a poll that already shows it ends here.
    version = task_detail_version_read(task_id=task_id, viewer=request.user)
    if version is not None and poll_sent(request):
        unchanged = poll_unchanged(request, version)
        if unchanged is not None:
            return unchanged
    try:
        detail = task_get_detail(task_id=task_id, viewer=request.user)
    except Task.DoesNotExist:
        archived = archived_task_visible_to(request.user, task_id)
        if archived is None:
            raise Http404(f"no task {task_id}") from None
        return render_page(
            request, "agentops/task_archived.html", {"archived": archived}, status=410
        )
    context: dict[str, Any] = {
        "detail": detail,
        "task": detail.task,
        "poll_version": version,
    }
    fragment = wants_fragment(request)
    if not fragment:
        # Other apps' sections (the review section of `reviews`), registered with the page.
        context["sections"] = task_page.sections_render(request, detail.task)
        # The model's summary of earlier work beside the rule-based one (not polled).
        context["earlier_work"] = task_earlier_work_get(
            task=detail.task, steps=[row.step for row in detail.steps]
        )
    # 286 (stop polling): htmx swaps this last fragment of a finished task and stops asking.
    return render_page(
        request,
        "agentops/task_detail.html",
        context,
        fragment="task_live",
        status=HTMX_STOP_POLLING if fragment and detail.is_terminal else 200,
    )


@login_required
@require_GET
def artifact(request: AuthenticatedHttpRequest, artifact_id: int) -> HttpResponseBase:
    """Open a stored artifact (a large tool result or model response) of a task the user may
    read. Served as plain text (never rendered as HTML; nosniff), whatever the payload holds."""
    from django.core.files.storage import default_storage
    from django.http import FileResponse

    try:
        stored = artifact_get_visible(artifact_id=artifact_id, viewer=request.user)
    except Task.DoesNotExist:
        raise Http404(f"no artifact {artifact_id}") from None
    response = FileResponse(
        default_storage.open(stored.name, "rb"), content_type="text/plain; charset=utf-8"
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = f'inline; filename="artifact-{stored.pk}.json"'
    return response


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page says; send them to the static icon."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition, for a scraper holding the bearer token (`AGENTOPS_METRICS_TOKEN`).

    Without a configured token the endpoint does not exist (404); a request without the token,
    or with another one, is refused (403). Session logins do not count: it is a machine's URL.
    """
    accepted = prometheus.token_accepted(request.headers.get("Authorization", ""))
    if accepted is None:
        raise Http404("metrics are not enabled")
    if not accepted:
        return HttpResponse("a bearer token is required\n", status=403, content_type="text/plain")
    return HttpResponse(prometheus.metrics_exposition(), content_type=prometheus.CONTENT_TYPE)
