"""The oversight dashboard: what the product exists to answer, for operators, auditors and admins.

Thin views over `reviews.metrics`: the page reads every figure for a time range and an agent, and
a policy admin turns a calibration proposal into an ordinary policy draft (nothing is published).
"""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_POST

from agentops.metrics import agent_names
from agentops.plumbing.web import AuthenticatedHttpRequest, permission_required
from policies.errors import PolicyError
from reviews.forms import CalibrationDraftForm, DashboardFilterForm
from reviews.metrics import figures_collect
from reviews.selectors.rubrics import rubric_agreement
from reviews.services import ReviewError, calibration_draft_create


@permission_required(
    "reviews.read_dashboard",
    refusal=cast(
        str, gettext_lazy("only operators, auditors and policy admins may see the dashboard")
    ),
)
@require_GET
def dashboard(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = DashboardFilterForm(request.GET or None, agents=agent_names())
    figures = figures_collect(form.window(), fast_seconds=form.fast_seconds())
    return render(
        request,
        "reviews/dashboard.html",
        # Reviewer agreement is over every rubric review so far, not the page's time range.
        {"form": form, "f": figures, "agreement": rubric_agreement()},
    )


@permission_required(
    "policies.edit_policy",
    refusal=cast(str, gettext_lazy("only policy admins may open policy drafts")),
)
@require_POST
def calibration_draft(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Open the proposed policy draft and go to it in the policy editor."""
    form = CalibrationDraftForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("That proposal is not valid any more; reload the dashboard."))
        return redirect("reviews:dashboard")
    data = form.cleaned_data
    try:
        draft = calibration_draft_create(
            actor=request.user,
            rule=data["rule"],
            agent=data["agent"],
            tool=data["tool"],
            threshold=data["threshold"],
            policy_id=data.get("policy_id"),
        )
    except ReviewError as exc:
        messages.error(request, str(exc))
        return redirect("reviews:dashboard")
    except PolicyError as exc:
        # str(exc) is the English for logs; the message is the refusal in the reader's language.
        messages.error(request, exc.message)
        return redirect("reviews:dashboard")
    messages.success(
        request,
        _(
            "Draft opened from the audit proposal: review it, dry-run it, then publish or "
            "discard it."
        ),
    )
    return redirect(reverse("policies:version_detail", args=[draft.pk]))
