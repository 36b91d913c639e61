"""Pages without a count: a window of rows and whether another page follows."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentops.models import Task
from agentops.plumbing.paging import MAX_PAGE, keyset_rows, page_number, window


def test_a_window_shows_its_rows_and_knows_whether_more_follow() -> None:
    rows = list(range(1, 121))

    first = window(rows, page=None, size=50)
    last = window(rows, page="3", size=50)

    assert first.object_list == rows[:50] and first.number == 1
    assert first.has_next and not first.has_previous and first.next_page_number == 2
    assert (first.start_index, first.end_index) == (1, 50)
    assert last.object_list == rows[100:] and not last.has_next and last.has_previous
    assert (last.start_index, last.end_index) == (101, 120)
    assert first.num_pages is None
    assert window(rows, page=1, size=50, count=120).num_pages == 3


def test_a_function_of_offset_and_limit_is_asked_for_one_row_more_than_a_page() -> None:
    asked: list[tuple[int, int]] = []

    def rows(offset: int, limit: int) -> list[int]:
        asked.append((offset, limit))
        return list(range(offset, min(offset + limit, 75)))

    page = window(rows, page=2, size=50)

    assert asked == [(50, 51)]
    assert page.object_list == list(range(50, 75)) and not page.has_next


def test_odd_page_numbers_fall_back_to_a_page_that_exists() -> None:
    rows = list(range(10))

    assert [page_number(raw) for raw in (None, "", "x", "0", "-3", "2")] == [1, 1, 1, 1, 1, 2]
    assert page_number(str(MAX_PAGE + 5)) == MAX_PAGE
    past = window(rows, page=7, size=5)
    assert past.number == 1 and past.object_list == rows[:5]
    empty = window([], page=1, size=5)
    assert empty.object_list == [] and (empty.start_index, empty.end_index) == (0, 0)


# -- keyset_rows: every row once, in order, a page at a time --------------------------------------

_BATCHES = itertools.count()


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    goals=st.lists(st.sampled_from("abc"), max_size=12),  # ties in the first column
    size=st.integers(min_value=1, max_value=5),
    descending=st.booleans(),
)
def test_keyset_rows_read_every_row_once_in_order_a_page_per_query(
    goals: list[str], size: int, descending: bool
) -> None:
    batch = next(_BATCHES)
    Task.objects.bulk_create(Task(agent="bench_noop", goal=f"{batch}:{goal}") for goal in goals)
    rows = Task.objects.filter(goal__startswith=f"{batch}:")
    order = ("-goal", "-id") if descending else ("goal", "id")
    expected = list(rows.order_by(*order).values_list("pk", flat=True))

    with CaptureQueriesContext(connection) as queries:
        read = [task.pk for task in keyset_rows(rows, order=order, size=size)]

    assert read == expected
    assert len(queries) == len(expected) // size + 1  # a last page shorter than `size` ends it
    assert not any("DECLARE" in query["sql"] for query in queries)  # no server-side cursor


def test_keyset_rows_need_both_columns_to_run_the_same_way() -> None:
    with pytest.raises(ValueError, match="same way"):
        next(keyset_rows(Task.objects.all(), order=("-goal", "id"), size=2))
