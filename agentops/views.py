from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET, require_http_methods


@login_required
@require_GET
def task_list(request: HttpRequest) -> HttpResponse:
    return HttpResponse("tasks")


@login_required
@require_http_methods(["GET", "POST"])
def task_new(request: HttpRequest) -> HttpResponse:
    return HttpResponse("new")


@login_required
@require_GET
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    return HttpResponse("detail")
