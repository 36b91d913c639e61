"""Pages of a long list that cost the same on page 1 of 10 and of 10,000 rows.

Django's `Paginator` counts the whole list on every request (a `COUNT(*)` over every matching
row, 100,000 tasks on the task list) to print "page 1 of N". A `Window` fetches one row more
than it shows instead, which says whether a next page exists; the total is given only where
the caller knows it cheaply (the inbox counts what waits through partial indexes). It offers
the parts of Django's `Page` the templates use (`number`, `has_next`, `next_page_number`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.db.models import Q

if TYPE_CHECKING:
    from django.db.models import QuerySet

T = TypeVar("T")

# Deeper than this, use the filters: the offset makes the database walk every row before it.
MAX_PAGE = 1000


@dataclass(frozen=True)
class Window(Generic[T]):
    object_list: list[T]
    number: int
    size: int
    has_next: bool
    # The number of rows in the whole list, when the caller knows it without a scan.
    count: int | None = None

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_other_pages(self) -> bool:
        return self.has_next or self.has_previous

    @property
    def next_page_number(self) -> int:
        return self.number + 1

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def num_pages(self) -> int | None:
        if self.count is None:
            return None
        return max(1, -(-self.count // self.size))

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def start_index(self) -> int:
        """The 1-based number of the first row shown (0 on an empty page), as in Django."""
        return self.offset + 1 if self.object_list else 0

    @property
    def end_index(self) -> int:
        return self.offset + len(self.object_list)

    def __iter__(self) -> Iterator[T]:
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)


def page_number(raw: Any) -> int:
    """The page asked for in a query string: a positive integer up to MAX_PAGE, else 1."""
    try:
        number = int(raw)
    except (TypeError, ValueError):
        return 1
    return min(max(number, 1), MAX_PAGE)


def window(
    rows: Sequence[T] | QuerySet[Any, T] | Callable[[int, int], Sequence[T]],
    *,
    page: Any,
    size: int,
    count: int | None = None,
) -> Window[T]:
    """Page `page` (as given in the query string) of `rows`, `size` rows a page; the first
    page when `page` is past the end.

    `rows` is sliceable (a QuerySet: one query with LIMIT size + 1 OFFSET ...), or a function
    of (offset, limit) returning up to `limit` rows."""
    number = page_number(page)
    offset = (number - 1) * size
    if callable(rows):
        fetched = list(rows(offset, size + 1))
    else:
        fetched = list(rows[offset : offset + size + 1])
    if not fetched and number > 1:
        # Past the end (the list shrank, or a hand-made URL): the first page, as Django's
        # get_page falls back to a page that exists.
        return window(rows, page=1, size=size, count=count)
    return Window(fetched[:size], number, size, len(fetched) > size, count)


def keyset_rows(
    rows: QuerySet[Any, T],
    *,
    order: tuple[str, str],
    size: int,
    key: Callable[[T], tuple[Any, Any]] | None = None,
) -> Iterator[T]:
    """Every row of `rows` in `order` (a column and a unique tie-breaker, both ascending or both
    descending: `("-created_at", "-id")`), read `size` rows at a time, each read a query of its
    own that starts after the last row of the one before.

    What an export streams, with memory flat however long the list and no server-side cursor
    (which lives in a server session: a pooler in transaction mode hands that session to other
    clients between two reads). `key` gives a row's two ordering values when the rows are not
    model instances (a `values_list`)."""
    first, second = order
    descending = first.startswith("-")
    if second.startswith("-") != descending:
        raise ValueError(f"{order}: both columns must run the same way")
    names = (first.lstrip("-"), second.lstrip("-"))
    ordered = rows.order_by(first, second)
    after: tuple[Any, Any] | None = None
    while True:
        page = ordered if after is None else ordered.filter(_past(names, after, descending))
        fetched = list(page[:size])
        yield from fetched
        if len(fetched) < size:
            return
        last = fetched[-1]
        after = key(last) if key else (getattr(last, names[0]), getattr(last, names[1]))


def _past(names: tuple[str, str], after: tuple[Any, Any], descending: bool) -> Q:
    """The rows that come after `after` in the order of `names`."""
    beyond = "lt" if descending else "gt"
    return Q(**{f"{names[0]}__{beyond}": after[0]}) | Q(
        **{names[0]: after[0], f"{names[1]}__{beyond}": after[1]}
    )
