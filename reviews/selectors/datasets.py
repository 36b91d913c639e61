"""Reviewed audit items as an evaluation dataset: one JSON object per item (JSON Lines) with the
step's inputs (the task's goal and input, the step, the tool's arguments), its output (the tool's
result), the verdict, the rubric answers that stand and any correction, filtered by agent, rule,
period and verdict.

Read as the exports are (`keyset_rows`: a query per chunk, no server-side cursor), with each
chunk's rubric reviews in one more query, so memory stays flat however many items; values stored
as artifacts are read back (`agentops.engine.loaded`), so a line holds the value, never a
pointer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from itertools import islice
from typing import Any

from django.db.models import QuerySet

from agentops.engine import loaded
from agentops.models import AuditItem
from agentops.plumbing.paging import keyset_rows
from agentops.states import AuditStatus
from reviews.models import AuditCase, RubricReview
from reviews.states import CaseStatus

DATASET_CHUNK = 500
OLDEST_FIRST = ("created_at", "id")


@dataclass(frozen=True)
class DatasetFilters:
    agent: str = ""
    rule: str = ""
    # The period: when the step ran (the audit item was queued), inclusive days.
    date_from: date | None = None
    date_to: date | None = None
    # ok or flagged; empty: both.
    verdict: str = ""


def _reviewed(filters: DatasetFilters) -> QuerySet[AuditItem]:
    items = AuditItem.objects.select_related("task", "step", "tool_call", "reviewed_by").exclude(
        status=AuditStatus.PENDING
    )
    exact = {"agent": filters.agent, "rule": filters.rule, "status": filters.verdict}
    items = items.filter(**{field: value for field, value in exact.items() if value})
    if filters.date_from:
        items = items.filter(created_at__date__gte=filters.date_from)
    if filters.date_to:
        items = items.filter(created_at__date__lte=filters.date_to)
    return items


def _chunks(rows: Iterable[AuditItem], size: int) -> Iterator[list[AuditItem]]:
    rows = iter(rows)
    while chunk := list(islice(rows, size)):
        yield chunk


def _review(review: RubricReview) -> dict[str, Any]:
    return {
        "reviewer": review.reviewer_label,
        "adjudication": review.adjudication,
        "answers": review.answers,
        "verdict": review.verdict,
        "note": review.note,
        "correction": review.correction,
    }


def _standing(case: AuditCase | None, reviews: list[RubricReview]) -> tuple[Any, str]:
    """The rubric answers that stand for a settled case (the adjudication's, or the answers
    every reviewer gave alike) and its correction (the adjudicator's, else the reviewers' last
    one given)."""
    if case is None or not reviews:
        return None, ""
    adjudication = next((r for r in reviews if r.adjudication), None)
    if case.status == CaseStatus.ADJUDICATED and adjudication is not None:
        return adjudication.answers, adjudication.correction
    corrections = [r.correction for r in reviews if r.correction]
    answers = reviews[0].answers if case.status == CaseStatus.AGREED else None
    return answers, corrections[-1] if corrections else ""


def _line(item: AuditItem, case: AuditCase | None, reviews: list[RubricReview]) -> dict[str, Any]:
    task, step, call = item.task, item.step, item.tool_call
    answers, correction = _standing(case, reviews)
    return {
        "item": item.pk,
        "task": item.task_id,
        "agent": item.agent,
        "tool": item.tool,
        "rule": item.rule,
        "lane": item.route,
        "created_at": item.created_at.isoformat(),
        "inputs": {
            "goal": task.goal,
            "task_input": loaded(task.input),
            "step": {"number": step.ordinal + 1, "title": step.title},
            "arguments": loaded(call.args),
        },
        "output": loaded(call.result),
        "verdict": item.status,
        "note": item.note,
        "reviewed_by": item.reviewed_by.get_username() if item.reviewed_by else None,
        "reviewed_at": item.reviewed_at.isoformat() if item.reviewed_at else None,
        "rubric": case.rubric.name if case else None,
        "answers": answers,
        "correction": correction,
        "reviews": [_review(r) for r in reviews],
    }


def dataset_rows(
    *, filters: DatasetFilters, chunk_size: int = DATASET_CHUNK
) -> Iterator[dict[str, Any]]:
    """Every reviewed audit item matching `filters`, oldest first, as a dataset row: three
    queries per `chunk_size` items (the items with their task, step and call; their cases; the
    cases' reviews)."""
    rows = keyset_rows(_reviewed(filters), order=OLDEST_FIRST, size=chunk_size)
    for chunk in _chunks(rows, chunk_size):
        cases = {
            case.audit_item_id: case
            for case in AuditCase.objects.select_related("rubric")
            .filter(audit_item__in=[item.pk for item in chunk])
            .prefetch_related("reviews")
        }
        for item in chunk:
            case = cases.get(item.pk)
            reviews: list[RubricReview] = []
            if case is not None:
                reviews = sorted(case.reviews.all(), key=lambda r: (r.created_at, r.pk))
            yield _line(item, case, reviews)
