"""The operator inbox at HTTP level: what waits, in a stable order, who holds it, live counts.

Its tasks are rows (tests/factories.py): the inbox reads what waits, whatever made it."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from agentops.models import Gate
from reviews.models import Claim
from tests.factories import gated_refund_row, stopped_trip_row
from tests.reviews.builders import client_for, open_gate

pytestmark = pytest.mark.django_db


def row_ids(page: str) -> list[str]:
    return re.findall(r'<tr id="((?:gate|task)-\d+)"', page)


def test_the_inbox_lists_stopped_tasks_and_gates_by_due_time_with_time_left(
    redis_clean, operator, starter
):
    trip = stopped_trip_row(created_by=starter)
    later = open_gate(gated_refund_row(created_by=starter, order_id="B2002"))
    sooner = open_gate(gated_refund_row(created_by=starter, order_id="E5005"))
    Gate.objects.filter(pk=sooner.pk).update(due_at=timezone.now() + timedelta(minutes=10))

    response = client_for(operator).get(reverse("reviews:inbox"))

    page = response.content.decode()
    assert response.status_code == 200
    # The stopped task is due since it stopped; gates by their timeout.
    assert row_ids(page) == [f"task-{trip.pk}", f"gate-{sooner.pk}", f"gate-{later.pk}"]
    assert re.search(r">\s*(9|10) min left\s*<", page)
    assert re.search(r">\s*59 min left\s*<", page)
    assert "authorization gap" in page
    assert re.search(r'<span id="nav-inbox-count" class="count" [^>]*>3</span>', page)
    assert "2 open gates · 1 stopped task" in page


def test_a_new_item_takes_its_slot_by_time_and_the_others_keep_their_order(
    redis_clean, operator, starter
):
    first = open_gate(gated_refund_row(created_by=starter, order_id="B2002"))
    second = open_gate(gated_refund_row(created_by=starter, order_id="E5005"))
    client = client_for(operator)
    before = row_ids(client.get(reverse("reviews:inbox")).content.decode())

    third = open_gate(gated_refund_row(created_by=starter, order_id="C3003"))
    after = row_ids(client.get(reverse("reviews:inbox"), HTTP_HX_REQUEST="true").content.decode())

    assert before == [f"gate-{first.pk}", f"gate-{second.pk}"]
    assert after == [*before, f"gate-{third.pk}"]


def test_the_polled_fragment_is_the_tbody_with_out_of_band_counts(redis_clean, operator, starter):
    gate = open_gate(gated_refund_row(created_by=starter))

    response = client_for(operator).get(reverse("reviews:inbox"), HTTP_HX_REQUEST="true")

    fragment = response.content.decode().strip()
    assert response.status_code == 200 and "HX-Request" in response["Vary"]
    assert fragment.startswith('<tbody id="inbox-rows" hx-get="/review/" hx-trigger="every 5s"')
    assert "<html" not in fragment
    assert f'id="select-gate-{gate.pk}"' in fragment and "hx-preserve" in fragment
    assert re.search(r'<span id="nav-inbox-count" [^>]*hx-swap-oob="true">1</span>', fragment)
    assert 'id="inbox-summary"' in fragment


def test_claim_and_release_show_who_holds_an_item(redis_clean, operator, operator2, starter):
    task = gated_refund_row(created_by=starter)
    mine, theirs = client_for(operator), client_for(operator2)

    claimed = mine.post(reverse("reviews:claim", args=[task.pk]), HTTP_HX_REQUEST="true")
    assert claimed.status_code == 200
    assert re.search(r'<td translate="no">olga</td>', claimed.content.decode())
    assert Claim.objects.get(task=task).user == operator

    taken = theirs.post(reverse("reviews:claim", args=[task.pk]))
    assert taken.status_code == 409
    assert "olga is already working on this" in taken.content.decode()
    assert Claim.objects.get(task=task).user == operator

    released = theirs.post(
        reverse("reviews:release", args=[task.pk]),
        {"next": reverse("reviews:gate", args=[open_gate(task).pk])},
    )
    assert released.status_code == 302
    assert released["Location"] == reverse("reviews:gate", args=[open_gate(task).pk])
    assert not Claim.objects.filter(task=task).exists()


def test_a_release_never_redirects_off_site(redis_clean, operator, starter):
    task = gated_refund_row(created_by=starter)

    response = client_for(operator).post(
        reverse("reviews:release", args=[task.pk]), {"next": "https://evil.example/"}
    )

    assert response["Location"] == reverse("reviews:inbox")


def test_an_auditor_reads_the_inbox_without_controls(redis_clean, auditor, starter):
    gate = open_gate(gated_refund_row(created_by=starter))

    page = client_for(auditor).get(reverse("reviews:inbox")).content.decode()

    assert f"gate-{gate.pk}" in page
    assert "Claim</button>" not in page and 'id="bulk-approve"' not in page
    assert 'id="nav-inbox-count"' not in page


def _inbox_queries(client: Any, django_assert_num_queries: Any) -> None:
    # session; the user with their roles (the group names, read with the user whether or not a
    # gate on the page asks who may decide it); the poll version's state (one statement); open
    # gates and stopped tasks, counted and one page of each read; the navigation counts; the
    # fleet's stops in force (the banner).
    with django_assert_num_queries(13):
        assert client.get(reverse("reviews:inbox")).status_code == 200


def test_the_inbox_costs_the_same_queries_for_one_item_or_many(
    redis_clean, operator, starter, django_assert_num_queries
):
    client = client_for(operator)
    stopped_trip_row(created_by=starter)
    client.get(reverse("reviews:inbox"))
    _inbox_queries(client, django_assert_num_queries)

    gated_refund_row(created_by=starter, order_id="B2002")
    _inbox_queries(client, django_assert_num_queries)

    task = gated_refund_row(created_by=starter, order_id="E5005")
    gated_refund_row(created_by=starter, order_id="C3003")
    stopped_trip_row(created_by=starter)
    client.post(reverse("reviews:claim", args=[task.pk]))

    _inbox_queries(client, django_assert_num_queries)


@pytest.mark.django_db
def test_a_poll_after_the_session_ended_sends_the_whole_page_to_log_in(client):
    response = client.get(reverse("reviews:inbox"), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert response["HX-Redirect"] == f"{reverse('login')}?next=/review/"
    assert response.content == b""


def test_each_row_links_its_own_item_and_selects_its_holder_in_the_assign_menu(
    redis_clean, operator, operator2, starter
):
    trip = stopped_trip_row(created_by=starter)
    held = gated_refund_row(created_by=starter, order_id="B2002")
    free = gated_refund_row(created_by=starter, order_id="E5005")
    Claim.objects.create(task=held, user=operator2)

    page = client_for(operator).get(reverse("reviews:inbox")).content.decode()

    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(r'<tr id="((?:gate|task)-\d+)".*?</tr>', page, re.S)
    }
    trip_row = rows[f"task-{trip.pk}"]
    assert f'href="{reverse("reviews:recover", args=[trip.pk])}"' in trip_row
    assert f'href="{reverse("agentops:task_detail", args=[trip.pk])}"' in trip_row
    assert f'action="{reverse("reviews:task_cancel", args=[trip.pk])}"' in trip_row
    assert f'id="pause-task-{trip.pk}"' not in trip_row
    for task, holder in ((held, operator2), (free, None)):
        gate = open_gate(task)
        row = rows[f"gate-{gate.pk}"]
        assert f'href="{reverse("reviews:gate", args=[gate.pk])}"' in row
        assert f'action="{reverse("reviews:task_pause", args=[task.pk])}"' in row
        assert f'action="{reverse("reviews:assign", args=[task.pk])}"' in row
        action = "release" if holder else "claim"
        assert f'hx-post="{reverse(f"reviews:{action}", args=[task.pk])}"' in row
        selected = re.findall(r'<option value="(\d+)" selected>', row)
        assert selected == ([str(holder.pk)] if holder else [])
        # Every operator is offered, in name order.
        assert re.findall(r"<option [^>]*>(\w+)</option>", row) == ["olga", "otto", "stan"]


def test_a_gate_is_decidable_only_by_a_member_of_its_group_who_may_decide(
    redis_clean, operator, auditor, starter
):
    from reviews.selectors import inbox_list

    gate = open_gate(gated_refund_row(created_by=starter))
    # An auditor in the approver group still lacks the permission to decide gates.
    Gate.objects.filter(pk=gate.pk).update(approver_group="auditors")

    def decidable(viewer: Any) -> bool:
        (item,) = [i for i in inbox_list(viewer=viewer).items if i.gate is not None]
        return item.decidable

    assert not decidable(type(auditor).objects.get(pk=auditor.pk))
    assert not decidable(type(operator).objects.get(pk=operator.pk))  # not in "auditors"
    Gate.objects.filter(pk=gate.pk).update(approver_group="operators")
    assert decidable(type(operator).objects.get(pk=operator.pk))


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_rows_not_yours_to_decide_keep_their_text_at_wcag_aa_contrast():
    from pathlib import Path

    css = (Path(__file__).resolve().parents[2] / "static" / "css" / "app.css").read_text()
    colours = dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-f]{6});", css))
    row = re.search(r"tr\.not-yours\s*\{([^}]*)\}", css)
    assert row is not None
    # An opacity below 1 blends the text into the page: axe-core counted 26 failures.
    opacity = re.search(r"opacity:\s*([0-9.]+)", row.group(1))
    assert opacity is None or float(opacity.group(1)) >= 1
    background = re.search(r"background:\s*var\(--([a-z-]+)\)", row.group(1))
    fill = colours[background.group(1)] if background else colours["surface"]
    for text in ("text", "muted", "warn", "accent", "danger"):
        assert _contrast(colours[text], fill) >= 4.5, text
