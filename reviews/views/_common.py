"""What the review pages share: the permission decorators (with the permissions `reviews.roles`
registers), the safe redirect back, the 404 for an unknown task, and the CSV export that streams
rows in chunks and neutralises spreadsheet formulas.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any, cast

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy

from agentops.plumbing.web import permission_required
from reviews.selectors import task_exists

CSV_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")

OPERATE = "reviews.decide_gate"

REVIEW_AUDIT = "reviews.review_audit"

operator_required = permission_required(
    OPERATE, refusal=cast(str, gettext_lazy("only operators may do this"))
)

auditor_required = permission_required(
    REVIEW_AUDIT, refusal=cast(str, gettext_lazy("only auditors may review audit items"))
)

reader_required = permission_required(
    "reviews.read_reviews",
    refusal=cast(str, gettext_lazy("only operators and auditors may see the review workspace")),
)

log_reader_required = permission_required(
    "reviews.read_decisions",
    refusal=cast(str, gettext_lazy("only operators, auditors and policy admins may read the log")),
)


def back_or_default(request: HttpRequest, default: str) -> HttpResponse:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = default
    return redirect(target)


def task_or_404(task_id: int) -> None:
    if not task_exists(task_id=task_id):
        raise Http404(f"no task {task_id}")


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


JSONL_CONTENT_TYPE = "application/x-ndjson; charset=utf-8"
JSONL_WRITE_ROWS = 100


def jsonl_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """`rows` as JSON Lines (one compact JSON object a line, UTF-8 kept as is), written in
    pieces of JSONL_WRITE_ROWS lines."""
    piece: list[str] = []
    for row in rows:
        piece.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        piece.append("\n")
        if len(piece) >= 2 * JSONL_WRITE_ROWS:
            yield "".join(piece)
            piece = []
    if piece:
        yield "".join(piece)


def jsonl_stream(rows: Iterable[dict[str, Any]], *, name: str) -> StreamingHttpResponse:
    """Stream `rows` as a JSON Lines download, as they are read: flat memory, no cap."""
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(jsonl_lines(rows), content_type=JSONL_CONTENT_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.jsonl"'
    return response
