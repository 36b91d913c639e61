"""Plan repair from the recovery panel: preview one change to a stopped task's plan, then apply
it (bound to the plan the person previewed), optionally retrying the task under it.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from agentops.engine import RepairRefused, TransitionRefused, plan_repair_preview_load
from agentops.models import Task
from agentops.plumbing.web import AuthenticatedHttpRequest
from reviews.forms import PlanRepairForm
from reviews.services import HeldByOther, NotAllowed, ReviewError, plan_repair_apply
from reviews.states import VIA_BROWSER
from reviews.views._common import operator_required
from reviews.views.recovery import render_recovery


def _panel(
    request: AuthenticatedHttpRequest,
    task_id: int,
    form: PlanRepairForm,
    *,
    alert: str = "",
    status: int = 200,
    preview: object = None,
) -> HttpResponse:
    return render_recovery(
        request, task_id, alert=alert, status=status, repair_form=form, repair_preview=preview
    )


@operator_required
@require_POST
def plan_repair(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = PlanRepairForm(request.POST, auto_id="repair_%s")
    if not form.is_valid():
        return _panel(request, task_id, form, status=400)
    edit = form.edit()
    if form.cleaned_data["intent"] == "preview":
        try:
            preview = plan_repair_preview_load(
                task_id=task_id, edit=edit, actor_label=request.user.get_username()
            )
        except Task.DoesNotExist:
            raise Http404(f"no task {task_id}") from None
        except RepairRefused as exc:
            return _panel(request, task_id, form, alert=exc.message, status=400)
        data = request.POST.copy()
        data["seen_digest"] = preview.before_digest
        bound = PlanRepairForm(data, auto_id="repair_%s")
        bound.is_valid()
        return _panel(request, task_id, bound, preview=preview)
    try:
        plan_repair_apply(
            task_id=task_id,
            edit=edit,
            actor=request.user,
            reason=form.cleaned_data["reason"],
            then_retry=form.cleaned_data["then_retry"],
            seen_digest=form.cleaned_data["seen_digest"],
            take_over=form.cleaned_data["take_over"],
            via=VIA_BROWSER,
        )
    except Task.DoesNotExist:
        raise Http404(f"no task {task_id}") from None
    except TransitionRefused as exc:
        return _panel(request, task_id, form, alert=exc.message, status=409)
    except NotAllowed as exc:
        return _panel(request, task_id, form, alert=str(exc), status=403)
    except HeldByOther as exc:
        return _panel(request, task_id, form, alert=str(exc), status=409)
    except ReviewError as exc:
        return _panel(request, task_id, form, alert=str(exc), status=400)
    if form.cleaned_data["then_retry"]:
        repaired = _("Task #%(id)s: the plan is repaired and the task is retried.")
    else:
        repaired = _("Task #%(id)s: the plan is repaired.")
    messages.success(request, repaired % {"id": task_id})
    if form.cleaned_data["then_retry"]:
        return redirect("agentops:task_detail", task_id=task_id)
    return redirect("reviews:recover", task_id=task_id)
