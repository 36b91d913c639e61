"""The inbox page (the polled queue of open gates and stopped tasks), its bulk approval, and the
claims on its items (claim, assign, release). A poll of the inbox rows that already show the
current version (`_inbox_version`) gets an empty 204 and no render
(agentops.plumbing.web.poll_unchanged), after one statement (`inbox_state`) besides the session and
the viewer's groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from agentops.plumbing.paging import page_number
from agentops.plumbing.web import (
    AuthenticatedHttpRequest,
    poll_sent,
    poll_sent_until_ms,
    poll_unchanged,
    poll_version,
    render_page,
    wants_fragment,
)
from reviews.forms import AssignForm, BulkApproveForm, InboxFilterForm
from reviews.roles import group_names
from reviews.selectors import (
    Inbox,
    InboxFilters,
    InboxItem,
    inbox_filter_choices,
    inbox_list,
    inbox_state,
    operators_list,
)
from reviews.services import (
    BulkResult,
    ReviewError,
    claim_assign,
    claim_release,
    claim_take,
    gates_bulk_approve,
)
from reviews.states import VIA_BROWSER
from reviews.templatetags.reviews_tags import times_steady_until
from reviews.views._common import (
    OPERATE,
    back_or_default,
    operator_required,
    reader_required,
    task_or_404,
)

BULK_RESULTS = "reviews_bulk_results"


# A pk no route holds, reversed once per URL name and replaced by each row's pk.
_PK_MARK = 987654321


def _url_maker(name: str) -> Callable[[int], str]:
    before, after = reverse(name, args=[_PK_MARK]).split(str(_PK_MARK))
    return lambda pk: f"{before}{pk}{after}"


@dataclass(frozen=True)
class _InboxRow:
    """One inbox row as the template renders it: the item, its links (reversed once per page,
    not once per row and tag) and, for operators, the assign menu's options with its holder
    selected (built once per holder, not once per row)."""

    item: InboxItem
    links: dict[str, str]
    assign_options: str


def _inbox_rows(items: Iterable[InboxItem], *, assignees: list[Any]) -> list[_InboxRow]:
    names = (
        "gate",
        "question",
        "recover",
        "release",
        "claim",
        "task_pause",
        "task_cancel",
        "assign",
    )
    url = {name: _url_maker(f"reviews:{name}") for name in names}
    url["task_detail"] = _url_maker("agentops:task_detail")
    options: dict[int | None, str] = {}

    def options_for(holder_pk: int | None) -> str:
        if holder_pk not in options:
            options[holder_pk] = format_html_join(
                "",
                '<option value="{}"{}>{}</option>',
                (
                    (
                        person.pk,
                        " selected" if person.pk == holder_pk else "",
                        person.get_username(),
                    )
                    for person in assignees
                ),
            )
        return options[holder_pk]

    rows = []
    for item in items:
        task_pk = item.task.pk
        links = {
            name: url[name](task_pk)
            for name in ("task_detail", "release", "claim", "task_pause", "task_cancel", "assign")
        }
        if item.gate is not None:
            links["gate"] = url["question" if item.kind == "question" else "gate"](item.gate.pk)
        else:
            links["recover"] = url["recover"](task_pk)
        holder_pk = item.holder.pk if item.holder is not None else None
        rows.append(
            _InboxRow(
                item=item, links=links, assign_options=options_for(holder_pk) if assignees else ""
            )
        )
    return rows


def _inbox_version(request: AuthenticatedHttpRequest, *, state: str, until_ms: int | None) -> str:
    """The version (agentops.plumbing.web.poll_version) of the polled inbox rows: what every
    viewer's inbox can show (`inbox_state`, one statement), who views it (their groups and role
    decide which rows are theirs to decide), the query (filters) and the page; `until_ms` the first
    time a relative time on the rows prints something else (ms since the epoch). Computed the
    same way whether the rows are rendered or only polled, from the request alone, so an
    unchanged poll reads nothing else."""
    user = request.user
    query = sorted((k, v) for k, v in request.GET.items() if k != "page" and v)
    return poll_version(
        "inbox",
        user.pk,
        user.is_superuser,
        sorted(group_names(user)),
        user.has_perm(OPERATE),
        query,
        page_number(request.GET.get("page")),
        state,
        until_ms=until_ms,
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _inbox_until_ms(inbox: Inbox, filters: InboxFilters, now: datetime) -> int | None:
    """Until when (ms since the epoch, rounded down) the rows of `inbox` read the same as at
    `now`: their relative times' next change (None: they print none). With an age filter, items
    enter the list as they age: the rows hold only now."""
    items = inbox.page.object_list
    until = (
        now
        if filters.age
        else times_steady_until(
            deadlines=[item.deadline for item in items],
            sinces=[item.since for item in items],
            now=now,
        )
    )
    if until is None:
        return None
    return (until - _EPOCH) // timedelta(milliseconds=1)


def _inbox_response(
    request: AuthenticatedHttpRequest,
    *,
    results: list[BulkResult] | None = None,
    bulk_form: BulkApproveForm | None = None,
    message: str = "",
    status: int = 200,
) -> HttpResponse:
    fragment = wants_fragment(request)
    polled = not message and results is None and bulk_form is None
    if polled and poll_sent(request):
        version = _inbox_version(request, state=inbox_state(), until_ms=poll_sent_until_ms(request))
        unchanged = poll_unchanged(request, version)
        if unchanged is not None:
            return unchanged
    # Read before the rows: a change committed in between shows on the page and changes the
    # next poll's version, never the other way round.
    state, now = inbox_state(), timezone.now()
    form = InboxFilterForm(request.GET, choices=inbox_filter_choices())
    filters = form.filters()
    inbox = inbox_list(filters=filters, viewer=request.user, page=request.GET.get("page"))
    page = inbox.page
    query = {k: v for k, v in request.GET.items() if k != "page" and v}
    can_decide = request.user.has_perm(OPERATE)
    assignees = operators_list() if can_decide else []
    version = _inbox_version(request, state=state, until_ms=_inbox_until_ms(inbox, filters, now))
    context = {
        "inbox": inbox,
        "page": page,
        "rows": _inbox_rows(page.object_list, assignees=assignees),
        # Asked once per request: the rows would otherwise ask the permission twice each.
        "can_decide": can_decide,
        "next_path": request.get_full_path(),
        "filter_form": form,
        "filters": filters,
        "filter_query": urlencode(query),
        "fragment": fragment,
        "results": results,
        "bulk_form": bulk_form or BulkApproveForm(),
        "message": message,
        "assignees": assignees,
        "poll_version": version,
    }
    return render_page(request, "reviews/inbox.html", context, fragment="inbox_rows", status=status)


@reader_required
@require_GET
def inbox(request: AuthenticatedHttpRequest) -> HttpResponse:
    results = None
    if not wants_fragment(request):
        stored = request.session.pop(BULK_RESULTS, None)
        if stored:
            results = [BulkResult(**row) for row in stored]
    return _inbox_response(request, results=results)


@operator_required
@require_POST
def gates_bulk_approve_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = BulkApproveForm(request.POST)
    if not form.is_valid():
        return _inbox_response(request, bulk_form=form, status=400)
    try:
        results = gates_bulk_approve(
            selection=form.cleaned_data["gate"],
            actor=request.user,
            via=VIA_BROWSER,
            reason=form.cleaned_data["reason"],
        )
    except ReviewError as exc:
        form.add_error(None, str(exc))
        return _inbox_response(request, bulk_form=form, status=400)
    # POST/redirect/GET: the results are shown once by the inbox, and a reload does not re-post.
    request.session[BULK_RESULTS] = [asdict(result) for result in results]
    return redirect("reviews:inbox")


@operator_required
@require_POST
def claim(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    task_or_404(task_id)
    try:
        claim_take(
            task_id=task_id,
            actor=request.user,
            take_over=request.POST.get("take_over") == "on",
            via=VIA_BROWSER,
        )
    except ReviewError as exc:
        if request.htmx:
            # htmx swaps only 2xx answers: the fresh rows show who holds it, plus the message.
            return _inbox_response(request, message=str(exc))
        return _inbox_response(request, message=str(exc), status=409)
    if request.htmx:
        return _inbox_response(request)
    return back_or_default(request, reverse("reviews:inbox"))


@operator_required
@require_POST
def assign(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    task_or_404(task_id)
    from django.contrib.auth import get_user_model

    form = AssignForm(request.POST, assignees=get_user_model().objects.filter(is_active=True))
    if not form.is_valid():
        return _inbox_response(request, message=_("Choose whom to assign it to."), status=400)
    try:
        claim_assign(
            task_id=task_id,
            actor=request.user,
            assignee=form.cleaned_data["assignee"],
            via=VIA_BROWSER,
        )
    except ReviewError as exc:
        return _inbox_response(request, message=str(exc), status=400)
    return back_or_default(request, reverse("reviews:inbox"))


@operator_required
@require_POST
def release(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    task_or_404(task_id)
    claim_release(task_id=task_id, actor=request.user)
    if request.htmx:
        return _inbox_response(request)
    return back_or_default(request, reverse("reviews:inbox"))
