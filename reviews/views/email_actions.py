"""The page an email action link opens: after sign-in, what the link would do and a form to
confirm it. A GET never decides; the POST (CSRF-checked like every form) decides through
`reviews.email_actions.email_action_take`.

The person's role is checked on the server at every request, GET and POST, as the inbox checks
it: a link stays in a mailbox after its recipient's role is removed, and the page shows a gate
(its goal and arguments) only to someone who may read the review workspace now.

Answers: 200 the confirmation (or, after the POST, a redirect to the gate panel); 400 a tampered
link or a missing reason; 403 someone who may not read the review workspace (any more; the
inbox's refusal, nothing of the gate shown), someone else's link, or a person who may not decide
the gate; 409 a gate decided already (the page says by whom); 410 a used or expired link.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods

from agentops.engine import Choice, TransitionRefused, message_of
from agentops.models import Gate
from agentops.plumbing.web import AuthenticatedHttpRequest
from agentops.states import GateStatus
from reviews.email_actions import (
    APPROVE,
    EmailAction,
    LinkRefused,
    email_action_check,
    email_action_choice,
    email_action_take,
)
from reviews.services import (
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    gate_decide_check,
)
from reviews.views._common import reader_required


class EmailActionForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3, "translate": "no"}),
        label=gettext_lazy("Reason"),
        help_text=gettext_lazy("Required to reject: the agent re-plans the step from it."),
    )


def _page(
    request: AuthenticatedHttpRequest,
    *,
    action: EmailAction | None = None,
    error: str = "",
    form: EmailActionForm | None = None,
    status: int = 200,
    choice: str = "",
) -> HttpResponse:
    """The link's page. `choice` is what the link asks (`email_action_choice`), for a link refused
    before its action could be read whole (the title says Approve or Reject all the same)."""
    gate = None
    if action is not None:
        gate = Gate.objects.select_related("task", "decided_by").filter(pk=action.gate_id).first()
    context: dict[str, Any] = {
        "action": action,
        "gate": gate,
        "error": error,
        "form": form or EmailActionForm(),
        "approving": action is not None and action.action == APPROVE,
        "choice": action.action if action is not None else choice,
        "decidable": gate is not None and gate.status == GateStatus.OPEN and not error,
        "arguments_json": (
            json.dumps(gate.arguments, indent=2, sort_keys=True, ensure_ascii=False)
            if gate is not None
            else ""
        ),
    }
    return render(request, "reviews/email_action.html", context, status=status)


# The inbox's role check, on every request: a recipient whose role was removed since the email
# was sent gets the inbox's 403, and nothing of the gate.
@reader_required
@require_http_methods(["GET", "POST"])
def email_action(request: AuthenticatedHttpRequest, token: str) -> HttpResponse:
    try:
        action = email_action_check(token=token, user=request.user)
    except LinkRefused as exc:
        return _page(
            request, error=str(exc), status=exc.http_status, choice=email_action_choice(token)
        )
    except NotAllowed as exc:
        return _page(request, error=str(exc), status=403, choice=email_action_choice(token))
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
        return _page(request, action=action, error=message_of(exc), status=409)
    except (NotAllowed, HeldByOther) as exc:
        return _page(request, action=action, error=str(exc), status=403)
    except Gate.DoesNotExist:
        return _page(
            request, error=_("there is no gate %(id)s") % {"id": action.gate_id}, status=404
        )
    except ReviewError as exc:
        form.add_error("reason", str(exc))
        return _page(request, action=action, form=form, status=400)
    if action.action == APPROVE:
        messages.success(request, _("You approved this gate from the email link."))
    else:
        messages.success(request, _("You rejected this gate from the email link."))
    return redirect("reviews:gate", gate_id=action.gate_id)


def _confirmation(request: AuthenticatedHttpRequest, action: EmailAction) -> HttpResponse:
    """What the link would do, when the decision service's checks let `request.user` do it now
    (the digest is checked when they confirm: the page shows the gate as it is)."""
    try:
        gate_decide_check(gate_id=action.gate_id, choice=Choice(action.action), actor=request.user)
    except Gate.DoesNotExist:
        return _page(
            request, error=_("there is no gate %(id)s") % {"id": action.gate_id}, status=404
        )
    except GateAlreadyDecided:
        return _page(request, action=action, status=409)
    except NotAllowed as exc:
        return _page(request, action=action, error=str(exc), status=403)
    except ReviewError as exc:
        return _page(request, action=action, error=str(exc), status=400)
    return _page(request, action=action)
