"""The gate panel and its decisions: approve, reject, edit and approve, reject and stop, each one
call of the decision service with the browser as its channel (`reviews.services.gates`). A
decision that lost a race answers 409 with the current state; a person who may not decide gets
403 with the reason; form errors answer 400 with what was typed kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from agentops.engine import TransitionRefused, approval_kind_of
from agentops.models import Gate
from agentops.plumbing.web import AuthenticatedHttpRequest
from reviews.forms import ApproveForm, EditApproveForm, RejectForm, RejectStopForm
from reviews.selectors import GatePanel, gate_get_panel, task_open_gate_id
from reviews.services import (
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    gate_approve,
    gate_check_decider,
    gate_edit_and_approve,
    gate_reject,
    gate_reject_and_stop,
)
from reviews.states import VIA_BROWSER
from reviews.views._common import operator_required, reader_required


def _gate_panel(gate_id: int) -> GatePanel:
    try:
        return gate_get_panel(gate_id=gate_id)
    except Gate.DoesNotExist:
        raise Http404(f"no gate {gate_id}") from None


def _render_gate(
    request: AuthenticatedHttpRequest,
    gate_id: int,
    *,
    bound: dict[str, Any] | None = None,
    alert: str = "",
    status: int = 200,
) -> HttpResponse:
    panel = _gate_panel(gate_id)
    gate = panel.gate
    if approval_kind_of(gate).takes_answer and request.method == "GET":
        # A gate its kind decides by an answer (an agent's question) is answered on its own
        # page, not approved.
        return redirect("reviews:question", gate_id=gate_id)
    refusal = ""
    if panel.is_open:
        try:
            gate_check_decider(gate=gate, user=request.user)
        except NotAllowed as exc:
            # As raised: a refusal naming a group shows it as written in any language.
            refusal = exc.reason
    forms = {
        "approve": ApproveForm(initial={"seen_digest": gate.args_digest}, auto_id="approve_%s"),
        "reject": RejectForm(initial={"seen_digest": gate.args_digest}, auto_id="reject_%s"),
        "edit": EditApproveForm(
            initial={"seen_digest": gate.args_digest, "arguments": panel.arguments_json},
            auto_id="edit_%s",
        ),
        "stop": RejectStopForm(initial={"seen_digest": gate.args_digest}, auto_id="stop_%s"),
        **(bound or {}),
    }
    context = {
        "panel": panel,
        "gate": gate,
        "task": panel.task,
        "form_error": next((name for name, form in (bound or {}).items() if form.errors), ""),
        "refusal": refusal,
        "alert": alert,
        "forms": forms,
        "held_by_other": panel.holder is not None and panel.holder.pk != request.user.pk,
        # A stale tab: the gate open on the task now (after a re-plan), to link to it.
        "open_gate_id": None if panel.is_open else task_open_gate_id(task_id=panel.task.pk),
    }
    return render(request, "reviews/gate_panel.html", context, status=status)


@reader_required
@require_GET
def gate_panel(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _render_gate(request, gate_id)


def _decision_page(
    request: AuthenticatedHttpRequest,
    gate_id: int,
    *,
    name: str,
    form: ApproveForm | RejectForm | EditApproveForm | RejectStopForm,
    apply: Callable[[dict[str, Any]], object],
) -> HttpResponse:
    """Parse the decision's form, `apply` it (one call of the decision service), and answer: the
    gate panel after it, or the panel again with the refusal (400, 403, 404, 409)."""
    if not form.is_valid():
        return _render_gate(request, gate_id, bound={name: form}, status=400)
    try:
        apply(form.cleaned_data)
    except Gate.DoesNotExist:
        raise Http404(f"no gate {gate_id}") from None
    except GateAlreadyDecided as exc:
        return _render_gate(request, gate_id, alert=str(exc), status=409)
    except NotAllowed as exc:
        return _render_gate(request, gate_id, alert=exc.reason, status=403)
    except HeldByOther as exc:
        form.add_error("take_over", str(exc))
        return _render_gate(request, gate_id, bound={name: form}, alert=str(exc), status=409)
    except TransitionRefused as exc:
        return _render_gate(request, gate_id, alert=exc.message, status=409)
    except ReviewError as exc:
        form.add_error("arguments" if name == "edit" else None, str(exc))
        return _render_gate(request, gate_id, bound={name: form}, status=400)
    return redirect("reviews:gate", gate_id=gate_id)


@operator_required
@require_POST
def gate_approve_view(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _decision_page(
        request,
        gate_id,
        name="approve",
        form=ApproveForm(request.POST, auto_id="approve_%s"),
        apply=lambda data: gate_approve(
            gate_id=gate_id,
            actor=request.user,
            via=VIA_BROWSER,
            seen_digest=data["seen_digest"],
            reason=data["reason"],
            take_over=data["take_over"],
        ),
    )


@operator_required
@require_POST
def gate_reject_view(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _decision_page(
        request,
        gate_id,
        name="reject",
        form=RejectForm(request.POST, auto_id="reject_%s"),
        apply=lambda data: gate_reject(
            gate_id=gate_id,
            actor=request.user,
            via=VIA_BROWSER,
            seen_digest=data["seen_digest"],
            feedback=data["feedback"],
            take_over=data["take_over"],
        ),
    )


@operator_required
@require_POST
def gate_edit_view(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _decision_page(
        request,
        gate_id,
        name="edit",
        form=EditApproveForm(request.POST, auto_id="edit_%s"),
        apply=lambda data: gate_edit_and_approve(
            gate_id=gate_id,
            actor=request.user,
            via=VIA_BROWSER,
            seen_digest=data["seen_digest"],
            arguments=data["arguments"],
            reason=data["reason"],
            take_over=data["take_over"],
        ),
    )


@operator_required
@require_POST
def gate_reject_stop_view(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _decision_page(
        request,
        gate_id,
        name="stop",
        form=RejectStopForm(request.POST, auto_id="stop_%s"),
        apply=lambda data: gate_reject_and_stop(
            gate_id=gate_id,
            actor=request.user,
            via=VIA_BROWSER,
            seen_digest=data["seen_digest"],
            outcome=data["outcome"],
            reason=data["reason"],
            take_over=data["take_over"],
        ),
    )
