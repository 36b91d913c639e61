"""The question panel: an agent's question with its context, and the answer a person gives
(POST only, with CSRF, bound to the digest of the question they saw). An answer that lost a race
(answered, expired or withdrawn first; a second submission of the same form) answers 409 with
the question as it is now; a person who may not answer gets 403 with the reason; a form error 400
with what was typed kept.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from agentops.models import Gate
from agentops.plumbing.web import AuthenticatedHttpRequest
from reviews.forms import QuestionAnswerForm
from reviews.selectors import QuestionPanel, question_get_panel
from reviews.services import (
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    gate_answer,
    gate_check_decider,
)
from reviews.states import VIA_BROWSER
from reviews.views._common import operator_required, reader_required


def _panel(gate_id: int) -> QuestionPanel:
    try:
        return question_get_panel(gate_id=gate_id)
    except Gate.DoesNotExist:
        raise Http404(f"no question {gate_id}") from None


def _render_question(
    request: AuthenticatedHttpRequest,
    gate_id: int,
    *,
    form: QuestionAnswerForm | None = None,
    alert: str = "",
    status: int = 200,
) -> HttpResponse:
    panel = _panel(gate_id)
    refusal = ""
    if panel.is_open:
        try:
            gate_check_decider(gate=panel.gate, user=request.user)
        except NotAllowed as exc:
            # As raised: a refusal naming a group shows it as written in any language.
            refusal = exc.reason
    context = {
        "panel": panel,
        "gate": panel.gate,
        "task": panel.task,
        "asked": panel.asked,
        "refusal": refusal,
        "alert": alert,
        "form": form
        or QuestionAnswerForm(
            asked=panel.asked, initial={"seen_digest": panel.gate.args_digest}, auto_id="q_%s"
        ),
        "held_by_other": panel.holder is not None and panel.holder.pk != request.user.pk,
    }
    return render(request, "reviews/question_panel.html", context, status=status)


@reader_required
@require_GET
def question_panel(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _render_question(request, gate_id)


@operator_required
@require_POST
def question_answer_view(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    panel = _panel(gate_id)
    form = QuestionAnswerForm(request.POST, asked=panel.asked, auto_id="q_%s")
    if not form.is_valid():
        return _render_question(request, gate_id, form=form, status=400)
    data = form.cleaned_data
    try:
        gate_answer(
            gate_id=gate_id,
            actor=request.user,
            seen_digest=data["seen_digest"],
            text=data.get("answer") or "",
            choice=data.get("choice") or "",
            take_over=data["take_over"],
            via=VIA_BROWSER,
        )
    except GateAlreadyDecided as exc:
        return _render_question(request, gate_id, alert=str(exc), status=409)
    except NotAllowed as exc:
        return _render_question(request, gate_id, alert=exc.reason, status=403)
    except HeldByOther as exc:
        return _render_question(request, gate_id, form=form, alert=str(exc), status=409)
    except ReviewError as exc:
        return _render_question(request, gate_id, form=form, alert=str(exc), status=400)
    messages.success(
        request,
        _("Task #%(id)s: your answer goes to the agent, and the task goes on.")
        % {"id": panel.task.pk},
    )
    return redirect("agentops:task_detail", task_id=panel.task.pk)
