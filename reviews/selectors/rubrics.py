"""Rubric reviews of the audit queue, read: the rubrics and the queues they are attached to,
which queue an audit item goes to, its case and the reviews a person may see of it, the
adjudication lane, and the agreement of each queue's reviewers per rubric item.

Reviews are independent: a person sees the others' answers to an item only once they have
submitted their own, or once the item has all its reviews (`reviews_visible`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone

from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.agreement import Agreement, agreement_of
from reviews.models import (
    AuditCase,
    AuditReservation,
    Rubric,
    RubricItem,
    RubricQueue,
    RubricReview,
)
from reviews.selectors.audit import reservation_in_force
from reviews.states import CaseStatus, RubricItemKind

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def rubric_list() -> list[Rubric]:
    """Every rubric with its items and the queues it is attached to (three queries)."""
    return list(
        Rubric.objects.prefetch_related(
            Prefetch("items", queryset=RubricItem.objects.order_by("position")),
            Prefetch("queues", queryset=RubricQueue.objects.order_by("agent", "rule")),
        )
    )


def rubric_queue_list() -> list[RubricQueue]:
    return list(RubricQueue.objects.select_related("rubric").order_by("agent", "rule"))


def _specificity(queue: RubricQueue) -> int:
    return (2 if queue.agent else 0) + (1 if queue.rule else 0)


def rubric_queue_pick(
    queues: Iterable[RubricQueue], *, agent: str, rule: str
) -> RubricQueue | None:
    """Of `queues`, the one an item of `agent` under `rule` goes to: the most specific that
    matches (agent and rule, then agent alone, then rule alone), or None."""
    matching = [q for q in queues if q.agent in ("", agent) and q.rule in ("", rule)]
    return max(matching, key=_specificity, default=None)


def rubric_queue_for(*, agent: str, rule: str) -> RubricQueue | None:
    """The queue an audit item of `agent` under `rule` goes to (one query), or None."""
    queues = RubricQueue.objects.select_related("rubric").filter(
        agent__in=("", agent), rule__in=("", rule)
    )
    return rubric_queue_pick(queues, agent=agent, rule=rule)


def rubric_items(rubric_id: int) -> list[RubricItem]:
    return list(RubricItem.objects.filter(rubric_id=rubric_id).order_by("position"))


def reviewed_by(reviews: Sequence[RubricReview], user: User | AnonymousUser) -> bool:
    return any(r.reviewer_id == user.pk and not r.adjudication for r in reviews)


def reviews_visible(case: AuditCase, reviews: Sequence[RubricReview], user: Any) -> bool:
    """Whether `user` may see the answers of `case`'s reviewers: once they submitted their own,
    or once the case has all its reviews (disputed or settled)."""
    return case.status != CaseStatus.COLLECTING or reviewed_by(reviews, user)


@dataclass
class RubricState:
    """An audit item's rubric review as one person sees it: the queue and rubric it goes to,
    its case (None before the first review), the reviews in, whether this person reviewed it,
    may see the reviews, who else holds it in a batch, whether they may review it, may
    adjudicate it."""

    queue: RubricQueue
    rubric: Rubric
    case: AuditCase | None = None
    reviews: list[RubricReview] = field(default_factory=list)
    mine: bool = False
    visible: bool = False
    # Someone else's batch holds the item now: they review it first.
    held_by_other: AuditReservation | None = None
    may_review: bool = False
    may_adjudicate: bool = False

    @property
    def required(self) -> int:
        return self.case.reviews_required if self.case else self.queue.reviews_required

    @property
    def given(self) -> int:
        return sum(1 for r in self.reviews if not r.adjudication)

    @property
    def status(self) -> str:
        return self.case.status if self.case else CaseStatus.COLLECTING

    @property
    def status_label(self) -> str:
        return str(CaseStatus(self.status).label)


def _state(
    *,
    item: AuditItem,
    queue: RubricQueue,
    case: AuditCase | None,
    reviews: list[RubricReview],
    user: Any,
) -> RubricState:
    mine = reviewed_by(reviews, user)
    status = case.status if case else CaseStatus.COLLECTING
    held = reservation_in_force(item)
    held_by_other = held if held is not None and held.holder_id != user.pk else None
    return RubricState(
        queue=queue,
        rubric=case.rubric if case else queue.rubric,
        case=case,
        reviews=reviews,
        mine=mine,
        visible=case is not None and reviews_visible(case, reviews, user),
        held_by_other=held_by_other,
        may_review=status == CaseStatus.COLLECTING
        and not mine
        and held_by_other is None
        and user.has_perm("reviews.review_audit"),
        may_adjudicate=status == CaseStatus.DISPUTED
        and not mine
        and user.has_perm("reviews.adjudicate_audit"),
    )


def rubric_states(items: Sequence[AuditItem], *, user: Any) -> dict[int, RubricState]:
    """The rubric state of each of `items` that goes to a rubric queue, as `user` sees it (three
    queries, however many items)."""
    queues = rubric_queue_list()
    if not queues or not items:
        return {}
    cases = {
        case.audit_item_id: case
        for case in AuditCase.objects.select_related("queue", "rubric").filter(
            audit_item__in=[item.pk for item in items]
        )
    }
    reviews: dict[int, list[RubricReview]] = defaultdict(list)
    for review in RubricReview.objects.filter(case__in=cases.values()).order_by("created_at", "id"):
        reviews[review.case_id].append(review)
    states = {}
    for item in items:
        case = cases.get(item.pk)
        if case is None and item.status != AuditStatus.PENDING:
            continue  # reviewed before a rubric was attached: it stays as it was reviewed
        queue = case.queue if case else rubric_queue_pick(queues, agent=item.agent, rule=item.rule)
        if queue is None:
            continue
        states[item.pk] = _state(
            item=item,
            queue=queue,
            case=case,
            reviews=reviews[case.pk] if case else [],
            user=user,
        )
    return states


def rubric_state_get(*, item: AuditItem, user: Any) -> RubricState | None:
    """The rubric state of one audit item as `user` sees it, or None when no rubric applies."""
    return rubric_states([item], user=user).get(item.pk)


def adjudication_lane() -> QuerySet[AuditCase]:
    """The cases whose reviewers disagree, oldest first, with their items and reviews."""
    return (
        AuditCase.objects.filter(status=CaseStatus.DISPUTED)
        .select_related(
            "audit_item", "audit_item__task", "audit_item__reservation__holder", "queue", "rubric"
        )
        .prefetch_related(
            Prefetch("reviews", queryset=RubricReview.objects.order_by("created_at", "id"))
        )
        .order_by("created_at", "id")
    )


@dataclass(frozen=True)
class ItemAgreement:
    """The agreement of one rubric item's answers in one queue."""

    key: str
    label: str
    kind: str
    agreement: Agreement


@dataclass(frozen=True)
class QueueAgreement:
    """The agreement of a queue's reviewers per rubric item, over the items they reviewed."""

    queue: RubricQueue
    rubric: Rubric
    reviews_required: int
    cases: int
    disputed: int
    items: list[ItemAgreement]

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue_id": self.queue.pk,
            "agent": self.queue.agent,
            "rule": self.queue.rule,
            "rubric": self.rubric.name,
            "reviews_required": self.reviews_required,
            "cases": self.cases,
            "disputed": self.disputed,
            "items": [
                {"key": i.key, "label": i.label, "kind": i.kind, **i.agreement.as_dict()}
                for i in self.items
            ],
        }


def rubric_agreement(*, queue_id: int | None = None) -> list[QueueAgreement]:
    """Per queue (or the one `queue_id`) and per rubric of its cases, the agreement of each rubric
    item's answers: Cohen's kappa when the queue asks two reviews per item, Krippendorff's alpha
    otherwise (`reviews.agreement`); adjudications do not count. Reads every non-adjudication
    review of the queues' cases once."""
    cases = AuditCase.objects.select_related("queue", "rubric").order_by("queue_id", "id")
    if queue_id is not None:
        cases = cases.filter(queue_id=queue_id)
    answers: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for case_id, given in (
        RubricReview.objects.filter(case__in=cases, adjudication=False)
        .order_by("created_at", "id")
        .values_list("case_id", "answers")
    ):
        answers[case_id].append(given)
    # A queue asked for another number of reviews later: its earlier cases are compared apart.
    grouped: dict[tuple[int, int, int], list[AuditCase]] = defaultdict(list)
    for case in cases:
        grouped[(case.queue_id, case.rubric_id, case.reviews_required)].append(case)
    items_of: dict[int, list[RubricItem]] = defaultdict(list)
    for item in RubricItem.objects.filter(rubric_id__in={key[1] for key in grouped}).order_by(
        "position"
    ):
        items_of[item.rubric_id].append(item)
    result = []
    for (_, rubric_id, required), queue_cases in grouped.items():
        queue, rubric = queue_cases[0].queue, queue_cases[0].rubric
        per_item = []
        for item in items_of[rubric_id]:
            units = [
                [a[item.key] for a in answers[case.pk] if a.get(item.key) is not None]
                for case in queue_cases
            ]
            per_item.append(
                ItemAgreement(
                    key=item.key,
                    label=item.label,
                    kind=item.kind,
                    agreement=agreement_of(
                        units,
                        reviewers=required,
                        scored=item.kind == RubricItemKind.SCORE,
                    ),
                )
            )
        result.append(
            QueueAgreement(
                queue=queue,
                rubric=rubric,
                reviews_required=required,
                cases=len(queue_cases),
                disputed=sum(
                    1
                    for c in queue_cases
                    if c.status in (CaseStatus.DISPUTED, CaseStatus.ADJUDICATED)
                ),
                items=per_item,
            )
        )
    return result


SETTLED_OR_DISPUTED = (CaseStatus.AGREED, CaseStatus.DISPUTED, CaseStatus.ADJUDICATED)


def rubric_next_item(*, user: Any) -> AuditItem | None:
    """The next audit item waiting for `user`'s rubric answers (those they took in a batch
    first, then the oldest): under a rubric queue, not settled or disputed, not answered by
    them yet, not held by someone else. What a keyboard-first auditor goes to after
    submitting."""
    queues = rubric_queue_list()
    if not queues:
        return None
    scope = Q()
    for queue in queues:
        scope |= Q(**{k: v for k, v in (("agent", queue.agent), ("rule", queue.rule)) if v})
    now = timezone.now()
    waiting = (
        AuditItem.objects.filter(scope, status=AuditStatus.PENDING)
        .exclude(rubric_case__reviews__reviewer=user)
        .exclude(rubric_case__status__in=SETTLED_OR_DISPUTED)
        .exclude(Q(reservation__until__gt=now) & ~Q(reservation__holder=user))
        .order_by("created_at", "id")
    )
    # The items one took in a batch come first.
    return (
        waiting.filter(reservation__holder=user, reservation__until__gt=now).first()
        or waiting.first()
    )
