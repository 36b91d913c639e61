"""Slack's endpoint (the app's Interactivity Request URL) and the account page's Slack link.

The interaction endpoint is exempt from CSRF because no browser posts to it: Slack does, and
every request is verified by Slack's signature over its body and timestamp, and refused when it
was seen before (`reviews.slack_interactions`), before anything is read from it. Every other POST
here keeps CSRF.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from agentops.engine import json_parsed
from agentops.plumbing.web import AuthenticatedHttpRequest, login_required
from reviews.services import NotAllowed, ReviewError
from reviews.services.slack import (
    SlackUnconfirmed,
    slack_identity_link,
    slack_identity_unlink,
    slack_link_read,
)
from reviews.slack_interactions import BadPayload, interaction_handle, request_refusal


# CSRF-exempt only because the request is verified by Slack's signature (see the module).
@csrf_exempt
@require_POST
def slack_interactions(request: HttpRequest) -> HttpResponse:
    if not settings.AGENTOPS["SLACK_SIGNING_SECRET"]:
        raise Http404("Slack is not configured")
    refusal = request_refusal(
        body=request.body,
        timestamp=request.headers.get("X-Slack-Request-Timestamp"),
        signature=request.headers.get("X-Slack-Signature"),
    )
    if refusal is not None:
        return HttpResponse(refusal, status=401, content_type="text/plain")
    try:
        # Read as every JSON from outside is: nesting too deep for Python is a ValueError.
        payload = json_parsed(request.POST.get("payload", ""))
        if not isinstance(payload, dict):
            raise BadPayload("the payload is not an object")
        answer = interaction_handle(payload)
    except (ValueError, BadPayload) as exc:
        return HttpResponse(f"bad payload: {exc}", status=400, content_type="text/plain")
    if answer.body is not None:
        return JsonResponse(answer.body, status=answer.status)
    return HttpResponse(status=answer.status)


@login_required
@require_http_methods(["GET", "POST"])
def slack_link(request: AuthenticatedHttpRequest, token: str) -> HttpResponse:
    """Confirm, then link, the Slack account a link from the Slack app names. A GET only shows
    what would be linked; the POST links it once Slack confirms it is the signed-in person's
    (`slack_identity_link`). Answers 400 (a bad or old link, a Slack account linked to someone
    else), 403 (the Slack account is not this person's), 503 (Slack could not be asked: the
    page offers to try again)."""
    try:
        team_id, slack_user_id = slack_link_read(token)
        if request.method == "POST":
            slack_identity_link(user=request.user, token=token)
            messages.success(
                request, _("Your Slack account is linked: buttons in Slack act as you.")
            )
            return redirect("reviews:account")
    except SlackUnconfirmed as exc:
        context = {"error": str(exc), "retry": True, "token": token}
        return render(request, "reviews/slack_link.html", context, status=503)
    except NotAllowed as exc:
        return render(request, "reviews/slack_link.html", {"error": str(exc)}, status=403)
    except ReviewError as exc:
        return render(request, "reviews/slack_link.html", {"error": str(exc)}, status=400)
    context = {"team_id": team_id, "slack_user_id": slack_user_id, "token": token}
    return render(request, "reviews/slack_link.html", context)


@login_required
@require_POST
def slack_unlink(request: AuthenticatedHttpRequest) -> HttpResponse:
    if slack_identity_unlink(user=request.user):
        messages.success(request, _("Your Slack account is unlinked."))
    return redirect("reviews:account")
