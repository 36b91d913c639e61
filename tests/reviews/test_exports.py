"""The CSV exports stream every matching row: no cap, memory that does not grow with the log, and
a variant with a byte-order mark so Excel reads UTF-8 (accents) right.

The rows are written with bulk_create (`decisions_logged`): the exports read the log, they do not
need the engine that fills it.
"""

from __future__ import annotations

import codecs
import csv
import io
import math
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import reverse

from policies.models import PolicyChange
from reviews import views
from reviews.selectors import LOG_LIMIT, POLICY_DECISIONS
from reviews.views import DECISION_CSV_HEADER
from tests.reviews.builders import client_for, decisions_logged

pytestmark = pytest.mark.django_db


def streamed(response: Any) -> list[bytes]:
    """The pieces of a streamed response, as the client receives them."""
    assert response.status_code == 200 and response.streaming
    return list(response.streaming_content)


# More rows than the page shows (LOG_LIMIT) and than one read (CSV_CHUNK_ROWS, set to 500 here):
# the export reads the log in several chunks and writes it in many pieces. (Each row costs the same
# at any count; 25,000 rows proved nothing 2,500 do not, at ten times the time.)
ROWS = 2_500
CHUNK_ROWS = 500


def test_the_decision_csv_streams_every_decision_plain_and_for_excel(operator, monkeypatch):
    monkeypatch.setattr(views.decisions, "CSV_CHUNK_ROWS", CHUNK_ROWS)
    decisions_logged(count=ROWS, reason="café au lait")
    policy_rows = PolicyChange.objects.filter(action__in=POLICY_DECISIONS).count()
    assert max(LOG_LIMIT, 4 * CHUNK_ROWS) < ROWS
    client = client_for(operator)

    plain = client.get(reverse("reviews:decisions_csv"))
    excel = client.get(reverse("reviews:decisions_csv"), {"excel": "1"})
    pieces = streamed(plain)
    plain_body, excel_body = b"".join(pieces), b"".join(streamed(excel))

    rows = list(csv.reader(io.StringIO(plain_body.decode("utf-8"))))
    assert rows[0] == DECISION_CSV_HEADER
    assert len(rows) == 1 + ROWS + policy_rows
    assert len(pieces) == math.ceil(len(rows) / views.CSV_WRITE_ROWS)  # not one write per row
    logged = [row for row in rows[1:] if row[1] == "reviews.gate.approved"]
    # Newest first, every one of them once.
    assert [int(row[3]) for row in logged] == list(range(ROWS, 0, -1))
    assert {(row[7], row[9]) for row in logged} == {("café au lait", "browser")}
    assert not plain_body.startswith(codecs.BOM_UTF8)
    assert plain["Content-Type"] == "text/csv; charset=utf-8"

    assert excel_body.startswith(codecs.BOM_UTF8)
    assert list(csv.reader(io.StringIO(excel_body.decode("utf-8-sig")))) == rows
    assert excel["Content-Disposition"].endswith('-excel.csv"')


def test_the_decision_csv_sends_its_first_piece_before_it_reads_the_rest_of_the_log(
    operator, monkeypatch
):
    """The export is a stream: the first piece goes out when its rows are read, not after the
    whole log is (the log is read as the client reads the response)."""
    monkeypatch.setattr(views.decisions, "CSV_CHUNK_ROWS", CHUNK_ROWS)
    decisions_logged(count=ROWS)
    read: list[int] = []
    log_iter = views.decisions.decision_log_iter

    def counted(**kwargs: Any) -> Iterator[Any]:
        for entry in log_iter(**kwargs):
            read.append(1)
            yield entry

    monkeypatch.setattr(views.decisions, "decision_log_iter", counted)

    response = client_for(operator).get(reverse("reviews:decisions_csv"))
    assert response.streaming and read == []  # nothing read before the client reads
    pieces = iter(response.streaming_content)
    first = next(pieces)

    # The header and the rows of the first piece: no more of the log than that was read.
    assert first.count(b"\n") == views.CSV_WRITE_ROWS
    assert len(read) == views.CSV_WRITE_ROWS - 1 < ROWS
    rest = b"".join(pieces)
    assert first.count(b"\n") + rest.count(b"\n") == 1 + len(read) and len(read) >= ROWS


def peak_bytes_while_reading(response: Any) -> tuple[int, int]:
    """Read a streamed response chunk by chunk, keeping nothing; (lines read, peak bytes
    allocated meanwhile)."""
    lines = 0
    tracemalloc.start()
    try:
        for chunk in response.streaming_content:
            lines += chunk.count(b"\n")
        return lines, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_decision_csv_uses_no_more_memory_for_six_times_the_rows(operator, monkeypatch):
    # Small chunks, so that both exports read several of them and reach their steady state.
    monkeypatch.setattr(views.decisions, "CSV_CHUNK_ROWS", 250)
    decisions_logged(count=1_000, actor_label="few")
    decisions_logged(count=5_000, actor_label="many")
    policy_rows = PolicyChange.objects.filter(action__in=POLICY_DECISIONS).count()
    client = client_for(operator)

    few_lines, few_peak = peak_bytes_while_reading(
        client.get(reverse("reviews:decisions_csv"), {"user": "few"})
    )
    all_lines, all_peak = peak_bytes_while_reading(client.get(reverse("reviews:decisions_csv")))

    print(
        f"peak while streaming: {few_peak:,} B for {few_lines:,} lines, {all_peak:,} B for "
        f"{all_lines:,} lines"
    )
    assert (few_lines, all_lines) == (1 + 1_000, 1 + 6_000 + policy_rows)
    # Holding the rows would take about six times as much for six times the rows; streaming
    # them in chunks takes about the same.
    assert all_peak < 1.5 * few_peak
