"""A person's account page: their language, notification preferences, recent deliveries, the
linked Slack account (`reviews.views.slack`) and API tokens (created once, shown once, revocable).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from agentops.plumbing.web import AuthenticatedHttpRequest, login_required
from agentops.tokens import api_token_create, api_token_revoke
from reviews.forms import ApiTokenForm, LanguageForm, NotificationPreferenceForm
from reviews.models import SlackIdentity
from reviews.selectors import api_token_list, delivery_list_for, language_chosen
from reviews.services import (
    language_choose,
    notification_preference_get,
    notification_preference_save,
)


@login_required
@require_http_methods(["GET", "POST"])
def account(request: AuthenticatedHttpRequest) -> HttpResponse:
    preference = notification_preference_get(user=request.user)
    form = NotificationPreferenceForm(request.POST or None, instance=preference)
    if request.method == "POST" and form.is_valid():
        notification_preference_save(form=form, user=request.user)
        messages.success(request, _("Your notification choices are saved."))
        return redirect("reviews:account")
    return _account_page(request, preferences=form, status=400 if form.errors else 200)


def _account_page(
    request: AuthenticatedHttpRequest,
    *,
    preferences: NotificationPreferenceForm | None = None,
    token_form: ApiTokenForm | None = None,
    language_form: LanguageForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "language_form": language_form
        or LanguageForm(initial={"language": language_chosen(user=request.user)}),
        "preferences": preferences
        or NotificationPreferenceForm(instance=notification_preference_get(user=request.user)),
        "token_form": token_form or ApiTokenForm(),
        "tokens": api_token_list(user=request.user),
        "deliveries": delivery_list_for(user=request.user),
        "slack_identity": SlackIdentity.objects.filter(user=request.user).first(),
    }
    return render(request, "reviews/account.html", context, status=status)


@login_required
@require_POST
def account_language(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = LanguageForm(request.POST)
    if not form.is_valid():
        return _account_page(request, language_form=form, status=400)
    language_choose(
        user=request.user, language=form.cleaned_data["language"], session=request.session
    )
    # The confirmation in the language just chosen (or the browser's, for "my browser's").
    translation.activate(
        form.cleaned_data["language"] or translation.get_language_from_request(request)
    )
    messages.success(request, _("Your language is saved."))
    return redirect("reviews:account")


@login_required
@require_POST
def api_token_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST)
    if not form.is_valid():
        return _account_page(request, token_form=form, status=400)
    row, token = api_token_create(user=request.user, name=form.cleaned_data["name"])
    # Shown once, on the next page, and never stored in the clear.
    messages.info(request, token, extra_tags=f"api-token {row.prefix}")
    return redirect("reviews:account")


@login_required
@require_POST
def api_token_revoke_view(request: AuthenticatedHttpRequest, token_id: int) -> HttpResponse:
    if not api_token_revoke(token_id=token_id, user=request.user):
        raise Http404(f"no live token {token_id} of yours")
    messages.success(request, _("The token is revoked."))
    return redirect("reviews:account")
