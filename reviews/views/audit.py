"""The audit queue: its page, its CSV export, and the review of one item or of several at once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from agentops.models import AuditItem
from agentops.plumbing.web import AuthenticatedHttpRequest, render_page
from agentops.selectors import json_preview
from reviews.forms import AuditBulkForm, AuditFilterForm, AuditReviewForm
from reviews.forms.audit import AuditBatchForm, DatasetFilterForm
from reviews.selectors import (
    audit_filter_choices,
    audit_item_export,
    audit_item_get,
    audit_item_page,
)
from reviews.selectors.datasets import dataset_rows
from reviews.selectors.rubrics import rubric_next_item, rubric_states
from reviews.services import (
    NotAllowed,
    ReviewError,
    audit_batch_release,
    audit_batch_reserve,
    audit_item_review,
    audit_items_bulk_review,
)
from reviews.states import VIA_BROWSER
from reviews.views._common import (
    CSV_CHUNK_ROWS,
    auditor_required,
    back_or_default,
    csv_stream,
    jsonl_stream,
    reader_required,
)


def _audit_filter_form(request: HttpRequest) -> AuditFilterForm:
    return AuditFilterForm(
        request.GET, choices=audit_filter_choices(), holder_id=getattr(request.user, "pk", None)
    )


@reader_required
@require_GET
def audit_queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = _audit_filter_form(request)
    filters = form.filters()
    page = audit_item_page(filters=filters, page=request.GET.get("page"))
    _with_rubric_states(page.object_list, request)
    context = {
        "form": form,
        "page": page,
        # Where "Next item to answer" goes: the oldest item waiting for this auditor's rubric.
        "next_rubric_item": rubric_next_item(user=request.user)
        if request.user.has_perm("reviews.review_audit")
        else None,
        "filter_query": urlencode(
            {k: v for k, v in asdict(filters).items() if v and k != "holder_id"}
        ),
        "batch_form": AuditBatchForm(auto_id="batch_%s"),
        # The dataset export takes the queue's agent, rule, dates and (a reviewed) status.
        "dataset_query": urlencode(
            {
                key: value
                for key, value in (
                    ("agent", filters.agent),
                    ("rule", filters.rule),
                    ("date_from", filters.date_from or ""),
                    ("date_to", filters.date_to or ""),
                    ("verdict", filters.status if filters.status != "pending" else ""),
                )
                if value
            }
        ),
    }
    return render_page(request, "reviews/audit_queue.html", context, fragment="audit_table")


def _with_rubric_states(items: Iterable[AuditItem], request: AuthenticatedHttpRequest) -> None:
    """Give each item under a rubric its `rubric_state` as the viewer sees it (its row links to
    the rubric page instead of offering OK and Flag)."""
    items = list(items)
    states = rubric_states(items, user=request.user)
    for item in items:
        item.rubric_state = states.get(item.pk)  # type: ignore[attr-defined]


AUDIT_CSV_HEADER = [
    "id",
    "created_at",
    "status",
    "task",
    "agent",
    "goal",
    "tool",
    "arguments",
    "result",
    "rule",
    "lane",
    "sampled",
    "policy_version",
    "reviewed_by",
    "reviewed_at",
    "note",
]


def _audit_csv_rows(items: Iterable[AuditItem]) -> Iterable[list[Any]]:
    yield AUDIT_CSV_HEADER
    for item in items:
        call = item.tool_call
        yield [
            item.pk,
            item.created_at.isoformat(),
            item.status,
            item.task_id,
            item.agent,
            item.task.goal,
            item.tool,
            json_preview(call.args, limit=10_000),
            json_preview(call.result, limit=10_000),
            item.rule,
            item.route,
            "yes" if item.sampled else "no",
            item.policy_version_number if item.policy_version_number is not None else "",
            item.reviewed_by.get_username() if item.reviewed_by else "",
            item.reviewed_at.isoformat() if item.reviewed_at else "",
            item.note,
        ]


@reader_required
@require_GET
def audit_csv(request: AuthenticatedHttpRequest) -> StreamingHttpResponse:
    filters = _audit_filter_form(request).filters()
    rows = _audit_csv_rows(audit_item_export(filters=filters, chunk_size=CSV_CHUNK_ROWS))
    return csv_stream(request, rows, name="audit")


@reader_required
@require_GET
def audit_dataset(request: AuthenticatedHttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The reviewed items matching the filters as an evaluation dataset (JSON Lines), streamed.
    A filter that does not parse answers 400 naming it, as the API's 422 does: a dataset wider
    than asked for is no dataset of what was asked."""
    form = DatasetFilterForm(request.GET)
    if not form.is_valid():
        wrong = "; ".join(
            f"{field}: {' '.join(str(error) for error in errors)}"
            for field, errors in form.errors.items()
        )
        return HttpResponse(
            _("Not exported: %(why)s") % {"why": wrong} + "\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    return jsonl_stream(dataset_rows(filters=form.filters()), name="audit-dataset")


@auditor_required
@require_POST
def audit_review(request: AuthenticatedHttpRequest, item_id: int) -> HttpResponse:
    form = AuditReviewForm(request.POST, auto_id=f"audit{item_id}_%s")
    reviewed = False
    if form.is_valid():
        try:
            audit_item_review(
                item_id=item_id,
                actor=request.user,
                via=VIA_BROWSER,
                verdict=form.cleaned_data["verdict"],
                note=form.cleaned_data["note"],
            )
            reviewed = True
        except AuditItem.DoesNotExist:
            raise Http404(f"no audit item {item_id}") from None
        except NotAllowed as exc:
            form.add_error(None, str(exc))
        except ReviewError as exc:
            form.add_error("note", str(exc))
    try:
        item = audit_item_get(item_id=item_id)
    except AuditItem.DoesNotExist:
        raise Http404(f"no audit item {item_id}") from None
    _with_rubric_states([item], request)
    context = {"item": item, "review_form": None if reviewed else form}
    if request.htmx:
        # The row is swapped in place; htmx swaps only 2xx answers, so an error row is a 200.
        return render(request, "reviews/audit_queue.html#audit_row", context)
    if reviewed:
        return redirect(f"{reverse('reviews:audit')}#audit-{item_id}")
    return render(request, "reviews/audit_item.html", context, status=400)


@auditor_required
@require_POST
def audit_bulk_review(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Mark the selected items ok (or flag them with one note); POST/redirect/GET."""
    form = AuditBulkForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Select at least one item and a verdict."))
        return back_or_default(request, reverse("reviews:audit"))
    try:
        done = audit_items_bulk_review(
            item_ids=form.cleaned_data["item"],
            actor=request.user,
            via=VIA_BROWSER,
            verdict=form.cleaned_data["verdict"],
            note=form.cleaned_data["note"],
        )
    except ReviewError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, ngettext("%(n)s item reviewed.", "%(n)s items reviewed.", done) % {"n": done}
        )
    return back_or_default(request, reverse("reviews:audit"))


@auditor_required
@require_POST
def audit_batch_take(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Take a batch of free items for a stated time; then the queue shows the batch."""
    form = AuditBatchForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("A batch is 1 to 50 items for 1 to 480 minutes."))
        return redirect("reviews:audit")
    try:
        taken = audit_batch_reserve(
            actor=request.user,
            size=form.cleaned_data["size"],
            minutes=form.cleaned_data["minutes"],
            via=VIA_BROWSER,
        )
    except ReviewError as exc:
        messages.error(request, str(exc))
        return redirect("reviews:audit")
    if not taken:
        messages.info(request, _("No free item waits for review."))
        return redirect("reviews:audit")
    messages.success(
        request,
        ngettext(
            "%(n)s item taken for %(minutes)s minutes: nobody else reviews them meanwhile; "
            "what you leave goes back to the queue then.",
            "%(n)s items taken for %(minutes)s minutes: nobody else reviews them meanwhile; "
            "what you leave goes back to the queue then.",
            len(taken),
        )
        % {"n": len(taken), "minutes": form.cleaned_data["minutes"]},
    )
    return redirect(f"{reverse('reviews:audit')}?held=mine")


@auditor_required
@require_POST
def audit_batch_give_back(request: AuthenticatedHttpRequest) -> HttpResponse:
    released = audit_batch_release(actor=request.user, via=VIA_BROWSER)
    messages.success(
        request,
        ngettext("%(n)s item given back.", "%(n)s items given back.", released) % {"n": released},
    )
    return redirect("reviews:audit")
