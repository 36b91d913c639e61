"""The fleet's stop button's page: the stops in force (each with its Resume), the last ones
lifted, and the form that stops every task, an agent's or a tool's. For holders of
`agentops.stop_fleet`; every write goes through `reviews.services.stops`."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from agentops.engine import StopRefused
from agentops.models import FleetStop
from agentops.plumbing.web import AuthenticatedHttpRequest, permission_required
from reviews.forms import FleetResumeForm, FleetStopForm
from reviews.services.stops import STOP_FLEET, fleet_resume_apply, fleet_stop_apply
from reviews.states import VIA_BROWSER
from reviews.wording import with_kept

stopper_required = permission_required(
    STOP_FLEET,
    refusal=cast(
        str, gettext_lazy("only holders of the stop permission may stop or resume the fleet")
    ),
)

RECENT_LIFTED = 10


@stopper_required
@require_http_methods(["GET", "POST"])
def fleet_stops(request: AuthenticatedHttpRequest) -> HttpResponse:
    """GET: the page. POST: make a stop (back to the page with what it paused, or the form
    with its errors, status 400)."""
    form = FleetStopForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        scope, target = form.scope_target()
        try:
            made = fleet_stop_apply(
                scope=scope,
                target=target,
                reason=form.cleaned_data["reason"],
                actor=request.user,
                via=VIA_BROWSER,
            )
        except StopRefused as exc:
            form.add_error(None, exc.message)
        else:
            counts = {"paused": len(made.paused), "running": len(made.running)}
            if made.stop.target:
                stopped: str = with_kept(
                    _(
                        "Stopped %(target)s: %(paused)s tasks paused; %(running)s running ones "
                        "stop at their next safe point."
                    ),
                    target=made.stop.target,
                    **counts,
                )
            else:
                stopped = (
                    _(
                        "Stopped every task: %(paused)s tasks paused; %(running)s running ones "
                        "stop at their next safe point."
                    )
                    % counts
                )
            messages.success(request, stopped)
            return redirect("reviews:fleet_stops")
    in_force = FleetStop.objects.filter(lifted_at__isnull=True).order_by("-created_at", "-id")
    lifted = FleetStop.objects.filter(lifted_at__isnull=False).order_by("-lifted_at", "-id")
    return render(
        request,
        "reviews/fleet_stops.html",
        {
            "form": form,
            "in_force": list(in_force),
            "lifted": list(lifted[:RECENT_LIFTED]),
            "resume_form": FleetResumeForm(),
        },
        status=400 if form.errors else 200,
    )


@stopper_required
@require_POST
def fleet_resume(request: AuthenticatedHttpRequest, stop_id: int) -> HttpResponse:
    form = FleetResumeForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        lifted = fleet_resume_apply(
            stop_id=stop_id, reason=reason, actor=request.user, via=VIA_BROWSER
        )
    except StopRefused as exc:
        messages.error(request, _("Nothing changed: %(why)s.") % {"why": exc.message})
    else:
        messages.success(
            request,
            _("Stop lifted: %(resumed)s tasks resumed, %(released)s queued tasks released.")
            % {"resumed": len(lifted.resumed), "released": len(lifted.released)},
        )
    return redirect("reviews:fleet_stops")
