"""The page an email action link opens: after sign-in, what the link would do and a form to
confirm it. A GET never decides; the POST (CSRF-checked like every form) decides through
`reviews.email_actions.email_action_take`.

Answers: 200 the confirmation (or, after the POST, a redirect to the gate panel); 400 a tampered
link or a missing reason; 403 someone else's link, or a person who may not decide the gate; 409 a
gate decided already (the page says by whom); 410 a used or expired link.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agentops.models import Gate
from agentops.services import TransitionRefused
from agentops.states import GateStatus
from agentops.web import AuthenticatedHttpRequest, login_required
from reviews.email_actions import (
    APPROVE,
    EmailAction,
    LinkRefused,
    email_action_check,
    email_action_take,
)
from reviews.roles import gate_decider_refusal
from reviews.services import GateAlreadyDecided, HeldByOther, NotAllowed, ReviewError


class EmailActionForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Required to reject: the agent re-plans the step from it.",
    )


def _page(
    request: AuthenticatedHttpRequest,
    *,
    action: EmailAction | None = None,
    error: str = "",
    form: EmailActionForm | None = None,
    status: int = 200,
) -> HttpResponse:
    gate = None
    if action is not None:
        gate = Gate.objects.select_related("task", "decided_by").filter(pk=action.gate_id).first()
    context: dict[str, Any] = {
        "action": action,
        "gate": gate,
        "error": error,
        "form": form or EmailActionForm(),
        "approving": action is not None and action.action == APPROVE,
        "decidable": gate is not None and gate.status == GateStatus.OPEN and not error,
        "arguments_json": (
            json.dumps(gate.arguments, indent=2, sort_keys=True, ensure_ascii=False)
            if gate is not None
            else ""
        ),
    }
    return render(request, "reviews/email_action.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def email_action(request: AuthenticatedHttpRequest, token: str) -> HttpResponse:
    try:
        action = email_action_check(token=token, user=request.user)
    except LinkRefused as exc:
        return _page(request, error=str(exc), status=exc.http_status)
    except NotAllowed as exc:
        return _page(request, error=str(exc), status=403)
    if request.method == "GET":
        return _confirmation(request, action)
    form = EmailActionForm(request.POST)
    if not form.is_valid():
        return _page(request, action=action, form=form, status=400)
    try:
        email_action_take(token=token, user=request.user, reason=form.cleaned_data["reason"])
    except LinkRefused as exc:
        return _page(request, action=action, error=str(exc), status=exc.http_status)
    except (GateAlreadyDecided, TransitionRefused) as exc:
        return _page(request, action=action, error=str(exc), status=409)
    except (NotAllowed, HeldByOther) as exc:
        return _page(request, action=action, error=str(exc), status=403)
    except Gate.DoesNotExist:
        return _page(request, error=f"there is no gate {action.gate_id}", status=404)
    except ReviewError as exc:
        form.add_error("reason", str(exc))
        return _page(request, action=action, form=form, status=400)
    verb = "approved" if action.action == APPROVE else "rejected"
    messages.success(request, f"You {verb} this gate from the email link.")
    return redirect("reviews:gate", gate_id=action.gate_id)


def _confirmation(request: AuthenticatedHttpRequest, action: EmailAction) -> HttpResponse:
    gate = Gate.objects.select_related("task", "decided_by").filter(pk=action.gate_id).first()
    if gate is None:
        return _page(request, error=f"there is no gate {action.gate_id}", status=404)
    if gate.status != GateStatus.OPEN:
        return _page(request, action=action, status=409)
    refusal = gate_decider_refusal(gate, request.user)
    if refusal is not None:
        return _page(request, action=action, error=refusal, status=403)
    return _page(request, action=action)
