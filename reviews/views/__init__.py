"""The review workspace pages: inbox, gate panel, recovery panel, audit queue and decision log.

Views are thin: check the permission (`agentops.web.permission_required`, with the permissions
`reviews.roles` registers), parse with a form, call one service or selector, render a page or its
fragment (`agentops.web.render_page`). State changes are POST only (with CSRF); the services check
roles, separation of duties and the seen digest again, so a forged request gets what the page
would have refused. A decision that lost a race answers 409 with the current state rendered; a
person who may not decide gets 403 with the reason; form errors answer 400 with what was typed
kept.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agentops.models import AuditItem, Gate, Task, ToolCall
from agentops.selectors import json_preview
from agentops.services import TransitionRefused
from agentops.web import (
    AuthenticatedHttpRequest,
    login_required,
    permission_required,
    render_page,
    wants_fragment,
)
from reviews.forms import (
    ApiTokenForm,
    ApproveForm,
    AssignForm,
    AuditBulkForm,
    AuditFilterForm,
    AuditReviewForm,
    BulkApproveForm,
    ConfirmForm,
    DecisionFilterForm,
    EditApproveForm,
    InboxFilterForm,
    InterventionForm,
    NotificationPreferenceForm,
    RejectForm,
    RejectStopForm,
    TaskControlForm,
    TaskModifyForm,
)
from reviews.selectors import (
    GatePanel,
    InboxItem,
    LogEntry,
    api_token_list,
    audit_filter_choices,
    audit_item_get,
    audit_item_list,
    audit_item_page,
    decision_log_iter,
    decision_log_list,
    delivery_list_for,
    gate_get_panel,
    inbox_filter_choices,
    inbox_list,
    operators_list,
    task_exists,
    task_get_recovery_panel,
)
from reviews.services import (
    BulkResult,
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    audit_item_review,
    audit_items_bulk_review,
    claim_assign,
    claim_release,
    claim_take,
    gate_approve,
    gate_check_decider,
    gate_edit_and_approve,
    gate_reject,
    gate_reject_and_stop,
    gates_bulk_approve,
    intervention_apply,
    ledger_call_confirm,
    notification_preference_get,
    notification_preference_save,
    task_control_apply,
    task_modify_apply,
)
from reviews.states import VIA_BROWSER
from reviews.tokens import api_token_create, api_token_revoke

BULK_RESULTS = "reviews_bulk_results"
CSV_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


OPERATE = "reviews.decide_gate"
REVIEW_AUDIT = "reviews.review_audit"
operator_required = permission_required(OPERATE, refusal="only operators may do this")
auditor_required = permission_required(REVIEW_AUDIT, refusal="only auditors may review audit items")
reader_required = permission_required(
    "reviews.read_reviews", refusal="only operators and auditors may see the review workspace"
)
log_reader_required = permission_required(
    "reviews.read_decisions",
    refusal="only operators, auditors and policy admins may read the log",
)


def _back(request: HttpRequest, default: str) -> HttpResponse:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = default
    return redirect(target)


# -- inbox -------------------------------------------------------------------------------------


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
    names = ("gate", "recover", "release", "claim", "task_pause", "task_cancel", "assign")
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
            links["gate"] = url["gate"](item.gate.pk)
        else:
            links["recover"] = url["recover"](task_pk)
        holder_pk = item.holder.pk if item.holder is not None else None
        rows.append(
            _InboxRow(
                item=item, links=links, assign_options=options_for(holder_pk) if assignees else ""
            )
        )
    return rows


def _inbox_response(
    request: AuthenticatedHttpRequest,
    *,
    results: list[BulkResult] | None = None,
    bulk_form: BulkApproveForm | None = None,
    message: str = "",
    status: int = 200,
) -> HttpResponse:
    fragment = wants_fragment(request)
    form = InboxFilterForm(request.GET, choices=inbox_filter_choices())
    filters = form.filters()
    inbox = inbox_list(filters=filters, viewer=request.user, page=request.GET.get("page"))
    page = inbox.page
    query = {k: v for k, v in request.GET.items() if k != "page" and v}
    can_decide = request.user.has_perm(OPERATE)
    assignees = operators_list() if can_decide else []
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


def _task_or_404(task_id: int) -> None:
    if not task_exists(task_id=task_id):
        raise Http404(f"no task {task_id}")


@operator_required
@require_POST
def claim(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    _task_or_404(task_id)
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
    return _back(request, reverse("reviews:inbox"))


@operator_required
@require_POST
def assign(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    _task_or_404(task_id)
    from django.contrib.auth import get_user_model

    form = AssignForm(request.POST, assignees=get_user_model().objects.filter(is_active=True))
    if not form.is_valid():
        return _inbox_response(request, message="Choose whom to assign it to.", status=400)
    try:
        claim_assign(
            task_id=task_id,
            actor=request.user,
            assignee=form.cleaned_data["assignee"],
            via=VIA_BROWSER,
        )
    except ReviewError as exc:
        return _inbox_response(request, message=str(exc), status=400)
    return _back(request, reverse("reviews:inbox"))


@operator_required
@require_POST
def release(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    _task_or_404(task_id)
    claim_release(task_id=task_id, actor=request.user)
    if request.htmx:
        return _inbox_response(request)
    return _back(request, reverse("reviews:inbox"))


# -- gate panel --------------------------------------------------------------------------------


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
    refusal = ""
    if panel.is_open:
        try:
            gate_check_decider(gate=gate, user=request.user)
        except NotAllowed as exc:
            refusal = str(exc)
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
    }
    return render(request, "reviews/gate_panel.html", context, status=status)


@reader_required
@require_GET
def gate_panel(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _render_gate(request, gate_id)


def _decide(
    request: AuthenticatedHttpRequest,
    gate_id: int,
    *,
    name: str,
    form: ApproveForm | RejectForm | EditApproveForm | RejectStopForm,
    apply: Callable[[dict[str, Any]], None],
) -> HttpResponse:
    if not form.is_valid():
        return _render_gate(request, gate_id, bound={name: form}, status=400)
    try:
        apply(form.cleaned_data)
    except Gate.DoesNotExist:
        raise Http404(f"no gate {gate_id}") from None
    except GateAlreadyDecided as exc:
        return _render_gate(request, gate_id, alert=str(exc), status=409)
    except NotAllowed as exc:
        return _render_gate(request, gate_id, alert=str(exc), status=403)
    except HeldByOther as exc:
        form.add_error("take_over", str(exc))
        return _render_gate(request, gate_id, bound={name: form}, alert=str(exc), status=409)
    except TransitionRefused as exc:
        return _render_gate(request, gate_id, alert=str(exc), status=409)
    except ReviewError as exc:
        form.add_error("arguments" if name == "edit" else None, str(exc))
        return _render_gate(request, gate_id, bound={name: form}, status=400)
    return redirect("reviews:gate", gate_id=gate_id)


@operator_required
@require_POST
def gate_approve_view(request: AuthenticatedHttpRequest, gate_id: int) -> HttpResponse:
    return _decide(
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
    return _decide(
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
    return _decide(
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
    return _decide(
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


# -- recovery panel ----------------------------------------------------------------------------


CONFIRMED_INTERVENTIONS = frozenset({"rollback", "abort"})


def _render_recovery(
    request: AuthenticatedHttpRequest,
    task_id: int,
    *,
    form: InterventionForm | None = None,
    alert: str = "",
    status: int = 200,
    confirming: str = "",
) -> HttpResponse:
    try:
        panel = task_get_recovery_panel(task_id=task_id, viewer=request.user)
    except Task.DoesNotExist:
        raise Http404(f"no task {task_id}") from None
    context = {
        "panel": panel,
        "task": panel.task,
        "detail": panel.detail,
        "recovery": panel.recovery,
        "form": form or InterventionForm(auto_id="recover_%s"),
        "alert": alert,
        "held_by_other": panel.holder is not None and panel.holder.pk != request.user.pk,
        "confirming": next((o for o in panel.options if o.action == confirming), None),
    }
    return render(request, "reviews/recovery_panel.html", context, status=status)


@reader_required
@require_GET
def recovery_panel(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    return _render_recovery(request, task_id)


@operator_required
@require_POST
def intervention(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    form = InterventionForm(request.POST, auto_id="recover_%s")
    if not form.is_valid():
        return _render_recovery(request, task_id, form=form, status=400)
    if (
        form.cleaned_data["action"] in CONFIRMED_INTERVENTIONS
        and not form.cleaned_data["confirmed"]
    ):
        # Ending the task is asked again, with its preview, before anything changes.
        return _render_recovery(request, task_id, form=form, confirming=form.cleaned_data["action"])
    try:
        intervention_apply(
            task_id=task_id,
            action=form.cleaned_data["action"],
            actor=request.user,
            via=VIA_BROWSER,
            reason=form.cleaned_data["reason"],
            take_over=form.cleaned_data["take_over"],
        )
    except Task.DoesNotExist:
        raise Http404(f"no task {task_id}") from None
    except TransitionRefused as exc:
        return _render_recovery(request, task_id, alert=str(exc), status=409)
    except NotAllowed as exc:
        return _render_recovery(request, task_id, alert=str(exc), status=403)
    except HeldByOther as exc:
        return _render_recovery(request, task_id, form=form, alert=str(exc), status=409)
    except ReviewError as exc:
        return _render_recovery(request, task_id, form=form, alert=str(exc), status=400)
    return redirect("agentops:task_detail", task_id=task_id)


@operator_required
@require_POST
def call_confirm(request: AuthenticatedHttpRequest, task_id: int, call_id: int) -> HttpResponse:
    form = ConfirmForm(request.POST)
    if not form.is_valid():
        return _render_recovery(
            request, task_id, alert="Choose whether the effect happened.", status=400
        )
    try:
        ledger_call_confirm(
            task_id=task_id,
            call_id=call_id,
            executed=form.cleaned_data["executed"],
            actor=request.user,
            via=VIA_BROWSER,
            reason=form.cleaned_data["reason"],
            take_over=form.cleaned_data["take_over"],
        )
    except ToolCall.DoesNotExist:
        raise Http404(f"no call {call_id} in task {task_id}") from None
    except TransitionRefused as exc:
        return _render_recovery(request, task_id, alert=str(exc), status=409)
    except NotAllowed as exc:
        return _render_recovery(request, task_id, alert=str(exc), status=403)
    except HeldByOther as exc:
        return _render_recovery(request, task_id, alert=str(exc), status=409)
    return redirect("agentops:task_detail", task_id=task_id)


# -- audit queue -------------------------------------------------------------------------------


def _audit_filter_form(request: HttpRequest) -> AuditFilterForm:
    return AuditFilterForm(request.GET, choices=audit_filter_choices())


@reader_required
@require_GET
def audit_queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = _audit_filter_form(request)
    filters = form.filters()
    page = audit_item_page(filters=filters, page=request.GET.get("page"))
    context = {
        "form": form,
        "page": page,
        "filter_query": urlencode({k: v for k, v in asdict(filters).items() if v}),
    }
    return render_page(request, "reviews/audit_queue.html", context, fragment="audit_table")


def csv_safe(value: Any) -> Any:
    """A cell a spreadsheet will not run as a formula: text starting = + - @ (or a tab or CR)
    gets a leading quote."""
    if isinstance(value, str) and value.startswith(CSV_FORMULA_PREFIXES):
        return "'" + value
    return value


class _Echo:
    def write(self, value: str) -> str:
        return value


# Excel on Windows reads a CSV as the system's code page unless it starts with a byte-order mark.
EXCEL_BOM = "\ufeff"
# Rows read from the database at a time, and rows per piece of the response.
CSV_CHUNK_ROWS = 2000
CSV_WRITE_ROWS = 200


def csv_stream(
    request: HttpRequest, rows: Iterable[list[Any]], *, name: str
) -> StreamingHttpResponse:
    """Stream `rows` (the header first) as a CSV download, every cell formula-neutralised;
    `?excel=1` starts it with a UTF-8 byte-order mark so Excel reads accents right.

    The rows are written as the client reads them: an export of any length uses flat memory
    and has no cap."""
    writer = csv.writer(_Echo())
    excel = request.GET.get("excel") == "1"

    def lines() -> Iterable[str]:
        # Written in pieces of CSV_WRITE_ROWS rows: one write per row would cost the server a
        # socket write per row.
        piece = [EXCEL_BOM] if excel else []
        for row in rows:
            piece.append(writer.writerow([csv_safe(cell) for cell in row]))
            if len(piece) >= CSV_WRITE_ROWS:
                yield "".join(piece)
                piece = []
        if piece:
            yield "".join(piece)

    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    suffix = "-excel" if excel else ""
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}{suffix}.csv"'
    return response


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
    items = audit_item_list(filters=_audit_filter_form(request).filters())
    rows = _audit_csv_rows(items.iterator(chunk_size=CSV_CHUNK_ROWS))
    return csv_stream(request, rows, name="audit")


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
    context = {"item": item, "review_form": None if reviewed else form}
    if request.htmx:
        # The row is swapped in place; htmx swaps only 2xx answers, so an error row is a 200.
        return render(request, "reviews/audit_queue.html#audit_row", context)
    if reviewed:
        return redirect(f"{reverse('reviews:audit')}#audit-{item_id}")
    return render(request, "reviews/audit_item.html", context, status=400)


# -- decision log ------------------------------------------------------------------------------


@log_reader_required
@require_GET
def decision_log(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = DecisionFilterForm(request.GET)
    entries, more = decision_log_list(filters=form.filters())
    context = {"form": form, "entries": entries, "more": more}
    return render_page(request, "reviews/decision_log.html", context, fragment="decision_table")


# -- pause, resume, cancel, modify --------------------------------------------------------------


@operator_required
@require_POST
def task_control(request: AuthenticatedHttpRequest, task_id: int, action: str) -> HttpResponse:
    """Pause, resume or cancel a task from the task page or the inbox; back to where it was
    asked (POST/redirect/GET), with what happened as a message."""
    from django.contrib import messages

    _task_or_404(task_id)
    form = TaskControlForm(request.POST)
    valid = form.is_valid()
    reason = form.cleaned_data.get("reason", "") if valid else ""
    if action == "cancel" and not (valid and form.cleaned_data["confirm"]):
        messages.error(request, "Nothing changed: tick the box to confirm that the task ends now.")
        return _back(request, reverse("agentops:task_detail", args=[task_id]))
    try:
        task_control_apply(
            task_id=task_id, action=action, actor=request.user, reason=reason, via=VIA_BROWSER
        )
    except TransitionRefused as exc:
        messages.error(request, f"Nothing changed: {exc}.")
    except ReviewError as exc:
        messages.error(request, str(exc))
    else:
        past = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]
        messages.success(request, f"Task #{task_id} {past}.")
    return _back(request, reverse("agentops:task_detail", args=[task_id]))


@operator_required
@require_POST
def task_modify_view(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    from django.contrib import messages

    _task_or_404(task_id)
    form = TaskModifyForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
        messages.error(request, f"Nothing changed: {errors}")
        return redirect("agentops:task_detail", task_id=task_id)
    try:
        changes = task_modify_apply(
            task_id=task_id,
            actor=request.user,
            via=VIA_BROWSER,
            budgets=form.budgets(),
            input_changes=form.cleaned_data["input"],
            reason=form.cleaned_data["reason"],
        )
    except TransitionRefused as exc:
        messages.error(request, f"Nothing changed: {exc}.")
    except ReviewError as exc:
        messages.error(request, f"Nothing changed: {exc}")
    else:
        if changes:
            messages.success(request, f"Task #{task_id} modified: {', '.join(sorted(changes))}.")
        else:
            messages.info(request, "Nothing to change: the values are the same.")
    return redirect("agentops:task_detail", task_id=task_id)


# -- bulk audit review and the decision log as CSV ------------------------------------------------


@auditor_required
@require_POST
def audit_bulk_review(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Mark the selected items ok (or flag them with one note); POST/redirect/GET."""
    from django.contrib import messages

    form = AuditBulkForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Select at least one item and a verdict.")
        return _back(request, reverse("reviews:audit"))
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
        messages.success(request, f"{done} item{'s' if done != 1 else ''} reviewed.")
    return _back(request, reverse("reviews:audit"))


DECISION_CSV_HEADER = [
    "time",
    "action",
    "actor",
    "task",
    "subject",
    "before_digest",
    "after_digest",
    "reason",
    "policy_version",
    "channel",
    "api_token",
]


@log_reader_required
@require_GET
def decision_csv(request: AuthenticatedHttpRequest) -> StreamingHttpResponse:
    entries = decision_log_iter(
        filters=DecisionFilterForm(request.GET).filters(), chunk_size=CSV_CHUNK_ROWS
    )
    return csv_stream(request, _decision_csv_rows(entries), name="decisions")


def _decision_csv_rows(entries: Iterable[LogEntry]) -> Iterable[list[Any]]:
    yield DECISION_CSV_HEADER
    for e in entries:
        yield [
            e.created_at.isoformat(),
            e.action,
            e.actor_label,
            e.task_id if e.task_id is not None else "",
            e.subject,
            e.before_digest,
            e.after_digest,
            e.reason,
            e.policy_version_number if e.policy_version_number is not None else "",
            e.channel,
            e.api_token,
        ]


# -- the account page: notification preferences and API tokens ---------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def account(request: AuthenticatedHttpRequest) -> HttpResponse:
    preference = notification_preference_get(user=request.user)
    form = NotificationPreferenceForm(request.POST or None, instance=preference)
    if request.method == "POST" and form.is_valid():
        notification_preference_save(form=form, user=request.user)
        messages.success(request, "Your notification choices are saved.")
        return redirect("reviews:account")
    return _account_page(request, preferences=form, status=400 if form.errors else 200)


def _account_page(
    request: AuthenticatedHttpRequest,
    *,
    preferences: NotificationPreferenceForm | None = None,
    token_form: ApiTokenForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "preferences": preferences
        or NotificationPreferenceForm(instance=notification_preference_get(user=request.user)),
        "token_form": token_form or ApiTokenForm(),
        "tokens": api_token_list(user=request.user),
        "deliveries": delivery_list_for(user=request.user),
    }
    return render(request, "reviews/account.html", context, status=status)


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
    messages.success(request, "The token is revoked.")
    return redirect("reviews:account")
