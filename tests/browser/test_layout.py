"""The inbox at phone widths (390 px, 375 px): it fits the viewport (no horizontal scroll of the
page), a wide table scrolls inside its own box, and axe-core finds no serious violation there."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from agentops.engine import task_create
from tests.browser.axe import axe_preloaded, axe_violations
from tests.browser.conftest import login
from tests.browser.test_flows import open_gate_of, run_workers
from tests.conftest import Processes

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONES = ({"width": 390, "height": 844}, {"width": 375, "height": 800})
# On failure: the first elements sticking out of the viewport outside a scroll box.
WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > innerWidth + 1 && !e.closest('.table-scroll'))
  .slice(0, 8).map(e => `${e.tagName}.${e.className}#${e.id}`)"""


def test_the_inbox_fits_a_phone_width(
    page: Page, live_server: Any, processes: Processes, operator: Any, starter: Any
):
    run_workers(processes)
    refund = task_create(
        agent="refund", goal="Refund order B2002", input={"order_id": "B2002"}, created_by=starter
    )
    gate = open_gate_of(refund)
    login(page, live_server, "olga")
    axe_preloaded(page.context)  # not injected inline: the pages' policy refuses that

    for phone in PHONES:
        page.set_viewport_size(phone)
        page.goto("/review/")
        expect(page.locator(f"#gate-{gate.pk}")).to_be_attached()

        width = page.evaluate("() => document.scrollingElement.scrollWidth")
        assert width <= phone["width"], (phone, page.evaluate(WIDEST))
        assert axe_violations(page) == [], phone
