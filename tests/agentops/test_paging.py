"""Pages without a count: a window of rows and whether another page follows."""

from __future__ import annotations

from agentops.plumbing.paging import MAX_PAGE, page_number, window


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
