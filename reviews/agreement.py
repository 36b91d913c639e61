"""How far independent reviewers agree, per rubric item: Cohen's kappa for two reviewers,
Krippendorff's alpha for more. Pure Python: values in, a figure out, no ORM.

Both measure agreement beyond chance: 1 is perfect agreement, 0 what chance alone gives, below 0
systematic disagreement. Either is None when chance already explains every answer (every
reviewer gave every item the same value, so nothing can be told apart), or there is nothing to
compare.

- Cohen's kappa (Cohen 1960) compares two reviewers, the first and the second review of each
  item (the order they were submitted in): kappa = (p_o - p_e) / (1 - p_e), with p_o the share of
  items they answered alike and p_e the share chance would give from how often each used each
  value. Values are categories (unweighted kappa), scores included.
- Krippendorff's alpha (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability") takes
  any number of reviewers and items with missing answers: alpha = 1 - D_o / D_e over the
  coincidence matrix of the values paired within each item (an item with fewer than two answers
  pairs nothing), with the nominal difference (0 alike, 1 not) for pass/fail and categories and
  the interval difference (the squared distance) for scores.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import permutations
from typing import Any

COHEN_KAPPA = "cohen_kappa"
KRIPPENDORFF_ALPHA = "krippendorff_alpha"

Difference = Callable[[Any, Any], float]


def nominal(a: Any, b: Any) -> float:
    return 0.0 if a == b else 1.0


def interval(a: Any, b: Any) -> float:
    return float(a - b) ** 2


def cohen_kappa(pairs: Sequence[tuple[Hashable, Hashable]]) -> float | None:
    """Cohen's kappa of two reviewers' answers, one (first, second) pair per item."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    first = Counter(a for a, _ in pairs)
    second = Counter(b for _, b in pairs)
    expected = sum(first[value] * second[value] for value in first) / (n * n)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def krippendorff_alpha(
    units: Sequence[Sequence[Any]], *, difference: Difference = nominal
) -> float | None:
    """Krippendorff's alpha of the answers each item (unit) was given, however many reviewers
    answered it; `difference` is the metric's squared difference of two values."""
    coincidences: dict[tuple[Any, Any], float] = defaultdict(float)
    for values in units:
        m = len(values)
        if m < 2:
            continue
        for a, b in permutations(values, 2):
            coincidences[(a, b)] += 1 / (m - 1)
    totals: dict[Any, float] = defaultdict(float)
    for (a, _), weight in coincidences.items():
        totals[a] += weight
    n = sum(totals.values())
    if n <= 1:
        return None
    observed = sum(w * difference(a, b) for (a, b), w in coincidences.items()) / n
    expected = sum(totals[a] * totals[b] * difference(a, b) for a in totals for b in totals) / (
        n * (n - 1)
    )
    if expected == 0:
        return None
    return 1 - observed / expected


@dataclass(frozen=True)
class Agreement:
    """The agreement of one rubric item's answers: the measure, its value (None when it cannot
    be told), and how many items and answers it was read from."""

    measure: str
    value: float | None
    items: int
    answers: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "measure": self.measure,
            "value": None if self.value is None else round(self.value, 4),
            "items": self.items,
            "answers": self.answers,
        }


def agreement_of(units: Sequence[Sequence[Any]], *, reviewers: int, scored: bool) -> Agreement:
    """The agreement of one rubric item over the items (`units`: each item's answers in the order
    they were given) of a queue that asks `reviewers` reviews per item: Cohen's kappa of each
    item's first two answers for two reviewers, else Krippendorff's alpha (interval for a score,
    `scored`, nominal otherwise). Items with fewer than two answers count for neither."""
    compared = [list(values) for values in units if len(values) >= 2]
    answers = sum(len(values) for values in compared)
    if reviewers == 2:
        pairs = [(values[0], values[1]) for values in compared]
        return Agreement(COHEN_KAPPA, cohen_kappa(pairs), len(pairs), 2 * len(pairs))
    alpha = krippendorff_alpha(compared, difference=interval if scored else nominal)
    return Agreement(KRIPPENDORFF_ALPHA, alpha, len(compared), answers)
