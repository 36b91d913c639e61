"""The agreement measures against worked examples from the literature."""

from __future__ import annotations

import pytest

from reviews.agreement import (
    COHEN_KAPPA,
    KRIPPENDORFF_ALPHA,
    agreement_of,
    cohen_kappa,
    interval,
    krippendorff_alpha,
)

N = None


def units(*reviewers: list[int | None]) -> list[list[int]]:
    """Each item's answers (reviewers as rows, items as columns; None: not answered)."""
    return [[v for v in column if v is not None] for column in zip(*reviewers, strict=True)]


def test_cohen_kappa_of_the_textbook_yes_no_table():
    """50 proposals read by two reviewers: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no; p_o = 0.7,
    p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5, kappa = 0.4 (Wikipedia, "Cohen's kappa", example 1)."""
    pairs = [("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15

    assert cohen_kappa(pairs) == pytest.approx(0.4)


def test_cohen_kappa_of_the_second_textbook_table():
    """45 yes/yes, 15 yes/no, 25 no/yes, 15 no/no: p_o = 0.6, p_e = 0.54, kappa = 0.1304."""
    pairs = [("y", "y")] * 45 + [("y", "n")] * 15 + [("n", "y")] * 25 + [("n", "n")] * 15

    assert cohen_kappa(pairs) == pytest.approx(0.06 / 0.46)


def test_cohen_kappa_is_none_when_chance_explains_every_answer():
    assert cohen_kappa([("pass", "pass")] * 5) is None
    assert cohen_kappa([]) is None


def test_krippendorff_alpha_of_four_observers_and_missing_values():
    """Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: four
    observers, twelve units, values 1-5 with gaps: nominal alpha 0.743, interval alpha 0.849."""
    data = units(
        [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
        [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
    )

    assert krippendorff_alpha(data) == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(data, difference=interval) == pytest.approx(0.849, abs=5e-4)


def test_krippendorff_alpha_of_three_coders_and_fifteen_units():
    """The reliability data of Krippendorff's worked example used by the `krippendorff`
    package's documentation: nominal alpha 0.691, interval alpha 0.811."""
    data = units(
        [N, N, N, N, N, 3, 4, 1, 2, 1, 1, 3, 3, N, 3],
        [1, N, 2, 1, 3, 3, 4, 3, N, N, N, N, N, N, N],
        [N, N, 2, 1, 3, 4, 4, N, 2, 1, 1, 3, 3, N, 4],
    )

    assert krippendorff_alpha(data) == pytest.approx(0.691, abs=5e-4)
    assert krippendorff_alpha(data, difference=interval) == pytest.approx(0.811, abs=5e-4)


def test_krippendorff_alpha_is_one_for_perfect_agreement_and_none_without_variation():
    assert krippendorff_alpha([["a", "a", "a"], ["b", "b", "b"]]) == pytest.approx(1.0)
    assert krippendorff_alpha([["a", "a"], ["a", "a", "a"]]) is None
    assert krippendorff_alpha([["a"], ["b"]]) is None


def test_agreement_of_picks_kappa_for_two_reviewers_and_alpha_for_more():
    two = agreement_of([["pass", "pass"], ["fail", "pass"], ["fail"]], reviewers=2, scored=False)
    three = agreement_of([[1, 2, 1], [3, 3, 3]], reviewers=3, scored=True)

    assert (two.measure, two.items, two.answers) == (COHEN_KAPPA, 2, 4)
    assert (three.measure, three.items, three.answers) == (KRIPPENDORFF_ALPHA, 2, 6)
    assert three.value == pytest.approx(
        krippendorff_alpha([[1, 2, 1], [3, 3, 3]], difference=interval)
    )
