"""The audit queue at HTTP level: context, filters, ok/flag by row, and the CSV export."""

from __future__ import annotations

import codecs
import csv
import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.models import Decision
from reviews.selectors import (
    AuditFilters,
    audit_filter_choices,
    audit_item_export,
    audit_item_page,
)
from reviews.services import audit_item_review
from reviews.views import csv_safe
from tests.reviews.builders import audited_refund, client_for, stopped_trip

pytestmark = pytest.mark.django_db


def item_ids(page: str) -> set[int]:
    return {int(n) for n in re.findall(r'<tr id="audit-(\d+)">', page)}


def test_the_queue_shows_each_item_with_its_context(sim, redis_clean, auditor):
    task = audited_refund(goal="Refund A1001: parcel damaged")
    refund = AuditItem.objects.get(task=task, tool="issue_refund")

    page = client_for(auditor).get(reverse("reviews:audit")).content.decode()

    assert item_ids(page) == set(AuditItem.objects.values_list("pk", flat=True))
    row = page[page.index(f'<tr id="audit-{refund.pk}">') :]
    row = row[: row.index("</tr>")]
    assert "Refund A1001: parcel damaged" in row and "refund" in row
    assert "&quot;amount&quot;: 56.0" in row and "&quot;status&quot;: &quot;refunded&quot;" in row
    assert "small payment" in row and ">audit<" in row and "To review" in row


def test_the_queue_filters_by_agent_tool_rule_lane_status_and_date(sim, redis_clean, auditor):
    refund_task = audited_refund()
    stopped_trip()
    items = {(i.agent, i.tool): i for i in AuditItem.objects.all()}
    email = items[("refund", "email_customer")]
    audit_item_review(item_id=email.pk, actor=auditor, verdict="ok")
    client = client_for(auditor)
    today = timezone.now().date()

    def ids(**params: Any) -> set[int]:
        return item_ids(client.get(reverse("reviews:audit"), params).content.decode())

    every = set(AuditItem.objects.values_list("pk", flat=True))
    by_refund = set(AuditItem.objects.filter(task=refund_task).values_list("pk", flat=True))
    assert ids() == every and len(every) >= 4
    assert ids(agent="refund") == by_refund
    assert ids(tool="email_customer") == {email.pk}
    assert ids(rule="notification") == {email.pk}
    assert ids(status="ok") == {email.pk}
    assert ids(status="pending") == every - {email.pk}
    assert ids(route="auto") == set(
        AuditItem.objects.filter(route="auto").values_list("pk", flat=True)
    )
    assert ids(date_from=today.isoformat(), date_to=today.isoformat()) == every
    assert ids(date_from=(today + timedelta(days=1)).isoformat()) == set()
    assert ids(agent="no-such-agent") == every


def test_an_auditor_flags_a_row_in_place_and_a_flag_needs_a_note(sim, redis_clean, auditor):
    audited_refund()
    item = AuditItem.objects.get(tool="issue_refund")
    client = client_for(auditor)
    url = reverse("reviews:audit_review", args=[item.pk])

    missing = client.post(url, {"verdict": "flagged", "note": ""}, HTTP_HX_REQUEST="true")
    assert missing.status_code == 200
    assert missing.content.decode().lstrip().startswith(f'<tr id="audit-{item.pk}">')
    assert "A flag needs a note" in missing.content.decode()
    item.refresh_from_db()
    assert item.status == AuditStatus.PENDING and not Decision.objects.exists()

    flagged = client.post(
        url, {"verdict": "flagged", "note": "refund before tracking"}, HTTP_HX_REQUEST="true"
    )

    row = flagged.content.decode()
    assert flagged.status_code == 200 and "<html" not in row
    assert "Flagged" in row and "refund before tracking" in row and "audrey" in row
    item.refresh_from_db()
    assert item.status == AuditStatus.FLAGGED and item.reviewed_by == auditor
    decision = Decision.objects.get()
    assert decision.action == "reviews.audit.flagged"
    assert decision.reason == "refund before tracking"


def test_without_htmx_a_verdict_redirects_and_an_error_renders_the_item(sim, redis_clean, auditor):
    audited_refund()
    item = AuditItem.objects.get(tool="issue_refund")
    client = client_for(auditor)
    url = reverse("reviews:audit_review", args=[item.pk])

    error = client.post(url, {"verdict": "flagged"})
    done = client.post(url, {"verdict": "ok"})

    assert error.status_code == 400 and "A flag needs a note" in error.content.decode()
    assert done.status_code == 302
    assert done["Location"] == f"{reverse('reviews:audit')}#audit-{item.pk}"
    item.refresh_from_db()
    assert item.status == AuditStatus.OK


def test_operators_read_the_queue_but_cannot_review(sim, redis_clean, operator):
    audited_refund()
    item = AuditItem.objects.get(tool="issue_refund")
    client = client_for(operator)

    page = client.get(reverse("reviews:audit")).content.decode()
    response = client.post(reverse("reviews:audit_review", args=[item.pk]), {"verdict": "ok"})

    assert f'<tr id="audit-{item.pk}">' in page and "Mark OK" not in page
    assert response.status_code == 403
    item.refresh_from_db()
    assert item.status == AuditStatus.PENDING


def test_the_csv_export_has_the_filtered_rows_and_no_live_formulas(sim, redis_clean, auditor):
    audited_refund(goal='=HYPERLINK("http://evil.example","click")')
    audited_refund(goal="+1 refund for @support")
    email = AuditItem.objects.filter(tool="email_customer").first()
    audit_item_review(
        item_id=email.pk, actor=auditor, verdict="flagged", note="-2+3 looks wrong @ops"
    )

    response = client_for(auditor).get(reverse("reviews:audit_csv"), {"tool": "email_customer"})

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == 2 == AuditItem.objects.filter(tool="email_customer").count()
    assert {row["tool"] for row in rows} == {"email_customer"}
    goals = {row["goal"] for row in rows}
    assert goals == {'\'=HYPERLINK("http://evil.example","click")', "'+1 refund for @support"}
    flagged = next(row for row in rows if row["id"] == str(email.pk))
    assert flagged["note"] == "'-2+3 looks wrong @ops"
    assert flagged["status"] == "flagged" and flagged["reviewed_by"] == "audrey"
    assert '"to": "customer-a1001@example.com"' in flagged["arguments"]
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@")), value


def test_csv_cells_that_start_a_formula_get_a_leading_quote():
    cells = {
        "=1+1": "'=1+1",
        "+SUM(A1)": "'+SUM(A1)",
        "-3": "'-3",
        "@cmd": "'@cmd",
        "\t=1": "'\t=1",
        "\r=1": "'\r=1",
        "plain": "plain",
        "a=b": "a=b",
        "": "",
    }
    assert {value: csv_safe(value) for value in cells} == cells
    assert csv_safe(42) == 42 and csv_safe(None) is None


def test_pages_of_the_queue_follow_the_export_order_without_counting(
    sim, redis_clean, auditor, django_assert_num_queries
):
    audited_refund()
    audited_refund(goal="Refund order A1002")
    stopped_trip()
    items = list(AuditItem.objects.order_by("id"))
    for item in items[::2]:
        audit_item_review(item_id=item.pk, actor=auditor, verdict="ok")
    filters = AuditFilters()
    # Items to review first, then newest first (sorted here, not by the code under test).
    newest_first = sorted(
        AuditItem.objects.all(), key=lambda item: (item.created_at, item.pk), reverse=True
    )
    to_review_first = sorted(newest_first, key=lambda item: item.status != AuditStatus.PENDING)
    expected = [item.pk for item in to_review_first]
    assert len(expected) >= 5
    assert [item.pk for item in audit_item_export(filters=filters, chunk_size=2)] == expected

    pages, number = [], 1
    while True:
        page = audit_item_page(filters=filters, page=number, size=2)
        pages.append(page)
        if not page.has_next:
            break
        number += 1

    assert [item.pk for page in pages for item in page.object_list] == expected
    assert pages[0].start_index == 1 and pages[-1].end_index == len(expected)
    # A page inside the items to review is one query; one past their end counts them.
    pending = AuditItem.objects.filter(status=AuditStatus.PENDING).count()
    with django_assert_num_queries(1):
        audit_item_page(filters=filters, page=1, size=1)
    with django_assert_num_queries(3):
        first_reviewed = audit_item_page(filters=filters, page=pending + 1, size=1)
    assert [item.pk for item in first_reviewed.object_list] == [expected[pending]]
    assert audit_filter_choices() == {
        "agent": sorted({i.agent for i in items}),
        "tool": sorted({i.tool for i in items}),
        "rule": sorted({i.rule for i in items}),
    }


def test_the_audit_csv_for_excel_starts_with_a_byte_order_mark_and_keeps_accents(
    sim, redis_clean, auditor
):
    audited_refund(goal="Remboursement du café")
    client = client_for(auditor)
    queue = client.get(reverse("reviews:audit")).content.decode()

    plain = b"".join(client.get(reverse("reviews:audit_csv")).streaming_content)
    excel = b"".join(client.get(reverse("reviews:audit_csv"), {"excel": "1"}).streaming_content)

    assert excel.startswith(codecs.BOM_UTF8) and not plain.startswith(codecs.BOM_UTF8)
    rows = list(csv.DictReader(io.StringIO(excel.decode("utf-8-sig"))))
    assert len(rows) == AuditItem.objects.count() > 0
    assert {row["goal"] for row in rows} == {"Remboursement du café"}
    assert excel.decode("utf-8-sig") == plain.decode("utf-8")
    assert "excel=1" in queue
