"""The audit queue: audit items with their filters, one page at a time, and one item for review."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ObjectDoesNotExist
from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from agentops.models import AuditItem
from agentops.plumbing.paging import Window, keyset_rows, window
from agentops.states import AuditStatus
from reviews.models import AuditReservation

if TYPE_CHECKING:
    pass

AUDIT_PAGE_SIZE = 50


@dataclass(frozen=True)
class AuditFilters:
    agent: str = ""
    tool: str = ""
    rule: str = ""
    route: str = ""
    status: str = ""
    date_from: date | None = None
    date_to: date | None = None
    # Reservations: "mine" (the items `holder_id` took in a batch and holds now) or "free"
    # (nobody holds them now).
    held: str = ""
    holder_id: int | None = None


HELD_MINE, HELD_FREE = "mine", "free"


def _audit_items(filters: AuditFilters) -> QuerySet[AuditItem]:
    queryset = AuditItem.objects.select_related(
        "task", "tool_call", "reviewed_by", "reservation__holder"
    )
    exact = {
        "agent": filters.agent,
        "tool": filters.tool,
        "rule": filters.rule,
        "route": filters.route,
        "status": filters.status,
    }
    queryset = queryset.filter(**{field: value for field, value in exact.items() if value})
    if filters.date_from:
        queryset = queryset.filter(created_at__date__gte=filters.date_from)
    if filters.date_to:
        queryset = queryset.filter(created_at__date__lte=filters.date_to)
    held_now = Q(reservation__until__gt=timezone.now())
    if filters.held == HELD_MINE:
        queryset = queryset.filter(held_now, reservation__holder_id=filters.holder_id)
    elif filters.held == HELD_FREE:
        queryset = queryset.exclude(held_now)
    return queryset


NEWEST_FIRST = ("-created_at", "-id")


def audit_item_export(*, filters: AuditFilters, chunk_size: int = 2000) -> Iterator[AuditItem]:
    """Every audit item matching `filters`, items to review first, then newest first (the order
    of the queue's pages), read `chunk_size` at a time without a server-side cursor."""
    matching = _audit_items(filters)
    pending = matching.filter(status=AuditStatus.PENDING)
    reviewed = matching.exclude(status=AuditStatus.PENDING)
    for items in (pending, reviewed):
        yield from keyset_rows(items, order=NEWEST_FIRST, size=chunk_size)


def audit_item_page(
    *, filters: AuditFilters, page: Any = 1, size: int = AUDIT_PAGE_SIZE
) -> Window[AuditItem]:
    """One page of audit items in the order of audit_item_export, read as two index-ordered lists
    (items to review, newest first, then the reviewed ones, newest first; an index serves
    each), so a page costs the same with 100 and with 1,000,000 items. Counts nothing
    unless the page starts past the end of the items to review (then it counts those)."""
    matching = _audit_items(filters)
    pending = matching.filter(status=AuditStatus.PENDING).order_by(*NEWEST_FIRST)
    reviewed = matching.exclude(status=AuditStatus.PENDING).order_by(*NEWEST_FIRST)

    def rows(offset: int, limit: int) -> list[AuditItem]:
        first = list(pending[offset : offset + limit])
        if len(first) == limit:
            return first
        pending_total = offset + len(first) if first else pending.count()
        start = max(0, offset - pending_total)
        return first + list(reviewed[start : start + limit - len(first)])

    return window(rows, page=page, size=size)


def reservation_in_force(item: AuditItem) -> AuditReservation | None:
    """The item's reservation while it holds, else None (expired: the item is back in the
    queue). Reads `item.reservation` (select_related it)."""
    try:
        held: AuditReservation = item.reservation
    except ObjectDoesNotExist:
        return None
    return held if held.until > timezone.now() else None


def audit_item_get(*, item_id: int) -> AuditItem:
    """One audit item with its context. Raises AuditItem.DoesNotExist."""
    return AuditItem.objects.select_related(
        "task", "tool_call", "reviewed_by", "reservation__holder"
    ).get(pk=item_id)


def audit_filter_choices() -> dict[str, list[str]]:
    """The agents, tools and rules that occur in the queue, for the filter menus (one query).

    A `DISTINCT` would read every audit item on every page of the queue; this walks the
    (agent, tool, rule) index instead, one probe per distinct triple (a loose index scan),
    so it costs the same with 1,000 and with 1,000,000 items."""
    table = connection.ops.quote_name(AuditItem._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH RECURSIVE seen(agent, tool, rule) AS (
                (SELECT agent, tool, rule FROM {table} ORDER BY agent, tool, rule LIMIT 1)
                UNION ALL
                SELECT later.agent, later.tool, later.rule
                FROM seen, LATERAL (
                    SELECT agent, tool, rule FROM {table}
                    WHERE (agent, tool, rule) > (seen.agent, seen.tool, seen.rule)
                    ORDER BY agent, tool, rule LIMIT 1
                ) AS later
            )
            SELECT agent, tool, rule FROM seen
            """
        )
        rows = cursor.fetchall()
    agents, tools, rules = set(), set(), set()
    for agent, tool, rule in rows:
        agents.add(agent)
        tools.add(tool)
        rules.add(rule)
    return {"agent": sorted(agents), "tool": sorted(tools), "rule": sorted(rules)}
