# ruff: noqa: RUF001
"""The recovery advisor's words in Simplified Chinese: its rationale and previews are English in
the record (what a decision stores) and read in the reader's language on a page, with tool names
and step titles kept as written."""

from __future__ import annotations

import json

from django.utils import translation

from agentops.engine.advisor import LedgerView, Situation, StepView, advise, preview
from tests.english import english_left

STEPS = (StepView(0, "Book flight", "succeeded"), StepView(1, "Send itinerary", "failed"))
LEDGER = (LedgerView("k1", "book_flight", "succeeded", "financial", compensable=True),)


def test_a_rationale_is_english_as_a_value_and_chinese_on_a_page() -> None:
    situation = Situation("rate_limited", "model", None, 0.5, step_attempts=3, step_retry_cap=3)

    with translation.override("zh-hans"):
        recommendation = advise(situation)
        page = str(recommendation.rationale.__html__())  # type: ignore[attr-defined]

    assert "attempt 3 of 3" in recommendation.rationale
    assert "第 3 次尝试，共 3 次" in page
    assert '<span translate="no">rate limited</span>' in page
    assert english_left(page) == []


def test_a_preview_is_stored_in_english_and_shown_in_chinese() -> None:
    with translation.override("zh-hans"):
        rollback = preview("rollback", STEPS, LEDGER)
        page = str(rollback.summary.__html__())  # type: ignore[attr-defined]
        stored = json.dumps({"preview": rollback.summary})

    assert json.loads(stored)["preview"].startswith("Undoes book_flight (in this order)")
    assert page.startswith('按此顺序撤销 <span translate="no">book_flight</span> 并结束任务')
    assert english_left(page) == []
