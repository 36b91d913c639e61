"""Rubric reviews in the browser: an audit item's rubric page (answer it, keyboard first, then on
to the next item waiting for you; see the others' answers once yours is in; a senior auditor
settles a disputed item there), the adjudication lane, and the rubrics page where policy admins
define rubrics and attach them to the audit queue, with the agreement of each queue's reviewers.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_POST

from agentops.models import AuditItem
from agentops.plumbing.web import AuthenticatedHttpRequest, permission_required
from reviews.forms.rubrics import RubricAnswerForm, RubricAttachForm, RubricCreateForm
from reviews.models import Rubric
from reviews.selectors import audit_item_get
from reviews.selectors.rubrics import (
    RubricState,
    adjudication_lane,
    rubric_agreement,
    rubric_items,
    rubric_list,
    rubric_next_item,
    rubric_state_get,
)
from reviews.services import (
    ReviewError,
    rubric_adjudicate,
    rubric_create,
    rubric_queue_attach,
    rubric_review_submit,
)
from reviews.states import VIA_BROWSER
from reviews.views._common import auditor_required, reader_required
from reviews.wording import with_kept

adjudicator_required = permission_required(
    "reviews.adjudicate_audit",
    refusal=cast(str, gettext_lazy("only senior auditors settle disputed items")),
)
rubric_admin_required = permission_required(
    "reviews.define_rubrics", refusal=cast(str, gettext_lazy("only policy admins define rubrics"))
)
rubric_reader_required = permission_required(
    "reviews.read_dashboard",
    refusal=cast(str, gettext_lazy("only reviewers and policy admins may see the rubrics")),
)


def _item_and_state(
    request: AuthenticatedHttpRequest, item_id: int
) -> tuple[AuditItem, RubricState]:
    try:
        item = audit_item_get(item_id=item_id)
    except AuditItem.DoesNotExist:
        raise Http404(f"no audit item {item_id}") from None
    state = rubric_state_get(item=item, user=request.user)
    if state is None:
        raise Http404(f"no rubric applies to audit item {item_id}")
    return item, state


def _rubric_page(
    request: AuthenticatedHttpRequest,
    item: AuditItem,
    state: RubricState,
    form: RubricAnswerForm | None = None,
    *,
    status: int = 200,
) -> HttpResponse:
    items = rubric_items(state.rubric.pk)
    if form is None and (state.may_review or state.may_adjudicate):
        form = RubricAnswerForm(items=items, auto_id="rubric_%s")
    context: dict[str, Any] = {"item": item, "state": state, "form": form, "rubric_items": items}
    return render(request, "reviews/audit_rubric.html", context, status=status)


@reader_required
@require_GET
def audit_rubric(request: AuthenticatedHttpRequest, item_id: int) -> HttpResponse:
    item, state = _item_and_state(request, item_id)
    return _rubric_page(request, item, state)


def _answered(
    request: AuthenticatedHttpRequest, item_id: int, *, adjudication: bool
) -> HttpResponse:
    item, state = _item_and_state(request, item_id)
    form = RubricAnswerForm(request.POST, items=rubric_items(state.rubric.pk), auto_id="rubric_%s")
    if form.is_valid():
        act = rubric_adjudicate if adjudication else rubric_review_submit
        try:
            act(
                item_id=item_id,
                actor=request.user,
                answers=form.answers(),
                verdict=form.cleaned_data["verdict"],
                note=form.cleaned_data["note"],
                correction=form.cleaned_data["correction"],
                via=VIA_BROWSER,
            )
        except ReviewError as exc:  # NotAllowed included: the reason is shown
            form.add_error(None, str(exc))
        else:
            messages.success(
                request, _("Audit item %(id)s: your answers are in.") % {"id": item_id}
            )
            following = None if adjudication else rubric_next_item(user=request.user)
            if following is not None:
                return redirect("reviews:audit_rubric", item_id=following.pk)
            return redirect("reviews:audit_rubric", item_id=item_id)
    item, state = _item_and_state(request, item_id)
    return _rubric_page(request, item, state, form, status=400)


@auditor_required
@require_POST
def audit_rubric_answer(request: AuthenticatedHttpRequest, item_id: int) -> HttpResponse:
    """Submit one's answers; then on to the next item waiting for them (POST/redirect/GET)."""
    return _answered(request, item_id, adjudication=False)


@adjudicator_required
@require_POST
def audit_adjudicate(request: AuthenticatedHttpRequest, item_id: int) -> HttpResponse:
    return _answered(request, item_id, adjudication=True)


@reader_required
@require_GET
def adjudication(request: AuthenticatedHttpRequest) -> HttpResponse:
    return render(request, "reviews/adjudication.html", {"cases": list(adjudication_lane()[:200])})


def _rubrics_page(
    request: AuthenticatedHttpRequest,
    *,
    create_form: RubricCreateForm | None = None,
    attach_form: RubricAttachForm | None = None,
    status: int = 200,
) -> HttpResponse:
    rubrics = rubric_list()
    choices = [(r.pk, r.name) for r in rubrics]
    context = {
        "rubrics": rubrics,
        "agreement": rubric_agreement(),
        "create_form": create_form or RubricCreateForm(auto_id="create_%s"),
        "attach_form": attach_form or RubricAttachForm(rubrics=choices, auto_id="attach_%s"),
    }
    return render(request, "reviews/rubrics.html", context, status=status)


@rubric_reader_required
@require_GET
def rubrics(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _rubrics_page(request)


@rubric_admin_required
@require_POST
def rubric_create_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = RubricCreateForm(request.POST, auto_id="create_%s")
    if form.is_valid():
        try:
            rubric = rubric_create(
                actor=request.user,
                name=form.cleaned_data["name"],
                instructions=form.cleaned_data["instructions"],
                items=form.cleaned_data["items"],
                via=VIA_BROWSER,
            )
        except ReviewError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, with_kept(_("Rubric '%(name)s' defined."), name=rubric.name))
            return redirect(reverse("reviews:rubrics"))
    return _rubrics_page(request, create_form=form, status=400)


@rubric_admin_required
@require_POST
def rubric_attach_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    choices = [(r.pk, r.name) for r in rubric_list()]
    form = RubricAttachForm(request.POST, rubrics=choices, auto_id="attach_%s")
    if form.is_valid():
        data = form.cleaned_data
        try:
            rubric_queue_attach(
                actor=request.user,
                rubric_id=data["rubric"],
                agent=data["agent"],
                rule=data["rule"],
                instructions=data["instructions"],
                reviews_required=data["reviews_required"],
                via=VIA_BROWSER,
            )
        except (ReviewError, Rubric.DoesNotExist) as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, _("Rubric attached to the audit queue."))
            return redirect(reverse("reviews:rubrics"))
    return _rubrics_page(request, attach_form=form, status=400)
