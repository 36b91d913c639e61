"""The decision log page and its CSV export, streamed in chunks (`CSV_CHUNK_ROWS` rows read at
a time), so exporting the whole log never holds it in memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from agentops.plumbing.web import AuthenticatedHttpRequest, render_page
from reviews.forms import DecisionFilterForm
from reviews.selectors import LogEntry, decision_log_iter, decision_log_list
from reviews.views._common import CSV_CHUNK_ROWS, csv_stream, log_reader_required


@log_reader_required
@require_GET
def decision_log(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = DecisionFilterForm(request.GET)
    entries, more = decision_log_list(filters=form.filters())
    context = {"form": form, "entries": entries, "more": more}
    return render_page(request, "reviews/decision_log.html", context, fragment="decision_table")


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
