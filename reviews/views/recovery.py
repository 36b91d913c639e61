"""The recovery panel of a stopped task, its interventions (rollback and abort ask for a
confirmation first) and the confirmation of a ledger call whose outcome is unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, pgettext
from django.views.decorators.http import require_GET, require_POST

from agentops.engine import TransitionRefused, plan_repair_options
from agentops.models import Task, ToolCall
from agentops.plumbing.web import AuthenticatedHttpRequest
from agentops.states import LedgerStatus
from reviews.again_page import restart_form_for
from reviews.forms import ConfirmForm, InterventionForm, PlanRepairForm, ScopeGrantForm
from reviews.selectors import OptionView, call_repeat_unprotected, task_get_recovery_panel
from reviews.services import (
    HeldByOther,
    NotAllowed,
    ReviewError,
    intervention_apply,
    ledger_call_confirm,
)
from reviews.states import VIA_BROWSER
from reviews.views._common import operator_required, reader_required
from reviews.views.grant_panel import grant_context

T = TypeVar("T")

CONFIRMED_INTERVENTIONS = frozenset({"rollback", "abort"})
# The confirmation line after an intervention, like the other task actions'.
INTERVENED = {
    "retry": gettext_noop("Task #%(id)s: the step is retried."),
    "skip": gettext_noop("Task #%(id)s: the step is skipped and the task goes on."),
    "rollback": gettext_noop("Task #%(id)s: rolling back its effects."),
    "abort": gettext_noop("Task #%(id)s aborted."),
}
# The interventions as the reason's help names them.
INTERVENTION_NAMES = {
    "retry": gettext_noop("retry"),
    "skip": gettext_noop("skip"),
    "rollback": gettext_noop("rollback"),
    "abort": gettext_noop("abort"),
}
UNPROTECTED_REPEAT = gettext_noop(
    "This tool does not honour idempotency keys: calling it again is not protected by a key, "
    "and if the call did happen its effect happens twice. Tick that you are sure it did not "
    "happen, then answer again."
)


# The option with a form of its own (and its own reason): the scope grant.
GRANT_OPTION = "grant"


def _reason_help(options: list[OptionView]) -> str:
    """What the shared reason goes with: the choices its buttons send (the grant asks for its
    own), so the panel never shows two fields that both read as the reason."""
    named = [
        _(INTERVENTION_NAMES.get(option.action, option.action))
        for option in options
        if option.action != GRANT_OPTION
    ]
    if len(named) > 1:
        listed = _("%(first)s or %(last)s") % {
            "first": pgettext("list separator", ", ").join(named[:-1]),
            "last": named[-1],
        }
    else:
        listed = "".join(named)
    said = []
    if named:
        said.append(
            _("Recorded in the decision log with your choice of %(choices)s.") % {"choices": listed}
        )
    if len(named) < len(options):
        said.append(_("The grant asks for its own reason."))
    return " ".join(said)


def render_recovery(
    request: AuthenticatedHttpRequest,
    task_id: int,
    *,
    form: InterventionForm | None = None,
    alert: str = "",
    status: int = 200,
    confirming: str = "",
    grant_form: ScopeGrantForm | None = None,
    **extra: Any,
) -> HttpResponse:
    try:
        panel = task_get_recovery_panel(task_id=task_id, viewer=request.user)
    except Task.DoesNotExist:
        raise Http404(f"no task {task_id}") from None
    form = form or InterventionForm(auto_id="recover_%s")
    form.fields["reason"].help_text = _reason_help(panel.options)
    context = {
        "repair_form": PlanRepairForm(auto_id="repair_%s"),
        "repair": plan_repair_options(
            panel.task, [row.step for row in panel.detail.steps], panel.detail.tool_calls
        )
        if panel.recovery is not None
        else None,
        "panel": panel,
        "task": panel.task,
        "detail": panel.detail,
        "recovery": panel.recovery,
        "form": form,
        "alert": alert,
        "held_by_other": panel.holder is not None and panel.holder.pk != request.user.pk,
        "confirming": next((o for o in panel.options if o.action == confirming), None),
        # Starting the task again is one more way out of the stop (the task page has it too).
        "restart_form": restart_form_for(request.user, panel.task),
        **grant_context(panel.task, request.user, form=grant_form),
        **extra,
    }
    return render(request, "reviews/recovery_panel.html", context, status=status)


def recovery_attempt(
    request: AuthenticatedHttpRequest,
    task_id: int,
    apply: Callable[[], T],
    *,
    not_found: type[Exception],
    missing: str,
    kept: dict[str, Any] | None = None,
) -> T | HttpResponse:
    """Run `apply` (a service acting on a stopped task) and return what it returned, or the
    recovery panel answering its refusal: `not_found` is a 404 (saying `missing`), a refused
    transition and someone else's claim 409, NotAllowed 403, another ReviewError 400; `kept`
    (the person's form) is shown again where they can correct it and send it again."""
    kept = kept or {}
    try:
        return apply()
    except not_found:
        raise Http404(missing) from None
    except TransitionRefused as exc:
        return render_recovery(request, task_id, alert=exc.message, status=409)
    except NotAllowed as exc:
        return render_recovery(request, task_id, alert=str(exc), status=403)
    except HeldByOther as exc:
        return render_recovery(request, task_id, **kept, alert=str(exc), status=409)
    except ReviewError as exc:
        return render_recovery(request, task_id, **kept, alert=str(exc), status=400)


@reader_required
@require_GET
def recovery_panel(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    return render_recovery(request, task_id)


@operator_required
@require_POST
def intervention(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = InterventionForm(request.POST, auto_id="recover_%s")
    if not form.is_valid():
        return render_recovery(request, task_id, form=form, status=400)
    if (
        form.cleaned_data["action"] in CONFIRMED_INTERVENTIONS
        and not form.cleaned_data["confirmed"]
    ):
        # Ending the task is asked again, with its preview, before anything changes.
        return render_recovery(request, task_id, form=form, confirming=form.cleaned_data["action"])
    refused = recovery_attempt(
        request,
        task_id,
        lambda: intervention_apply(
            task_id=task_id,
            action=form.cleaned_data["action"],
            actor=request.user,
            via=VIA_BROWSER,
            reason=form.cleaned_data["reason"],
            take_over=form.cleaned_data["take_over"],
        ),
        not_found=Task.DoesNotExist,
        missing=f"no task {task_id}",
        kept={"form": form},
    )
    if isinstance(refused, HttpResponse):
        return refused
    messages.success(request, _(INTERVENED[form.cleaned_data["action"]]) % {"id": task_id})
    return redirect("agentops:task_detail", task_id=task_id)


@operator_required
@require_POST
def call_confirm(request: AuthenticatedHttpRequest, task_id: int, call_id: int) -> HttpResponse:
    form = ConfirmForm(request.POST)
    if not form.is_valid():
        return render_recovery(
            request, task_id, alert=_("Choose whether the effect happened."), status=400
        )
    if not form.cleaned_data["executed"] and not form.cleaned_data["sure"]:
        call = ToolCall.objects.filter(
            pk=call_id, task_id=task_id, status=LedgerStatus.EXECUTED_UNKNOWN
        ).first()
        if call is not None and call_repeat_unprotected(call):
            return render_recovery(request, task_id, alert=_(UNPROTECTED_REPEAT), status=400)
    refused = recovery_attempt(
        request,
        task_id,
        lambda: ledger_call_confirm(
            task_id=task_id,
            call_id=call_id,
            executed=form.cleaned_data["executed"],
            actor=request.user,
            via=VIA_BROWSER,
            reason=form.cleaned_data["reason"],
            take_over=form.cleaned_data["take_over"],
        ),
        not_found=ToolCall.DoesNotExist,
        missing=f"no call {call_id} in task {task_id}",
    )
    if isinstance(refused, HttpResponse):
        return refused
    return redirect("agentops:task_detail", task_id=task_id)
