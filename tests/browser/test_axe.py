"""The axe-core sweep of tests/browser/axe.py: one run per document, and a run again for any
change someone could see."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from tests.browser.axe import AxeSweep
from tests.browser.conftest import VIEWPORT

# No database: the pages are set in the browser.
pytestmark = [pytest.mark.browser]

# A document of the sweep, with a token in the places each response fills anew.
SWEPT = """<!doctype html><html lang="en"><head><title>Sweep</title></head>
<body hx-headers='{{"X-CSRFToken": "{token}"}}'><main><h1>Orders</h1>{extra}
<form method="post"><input type="hidden" name="csrfmiddlewaretoken" value="{token}">
<button>Go</button></form></main></body></html>"""


def test_a_sweep_runs_axe_once_per_document_and_again_for_any_visible_change(chromium: Browser):
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    sweep = AxeSweep()
    try:
        page.set_content(SWEPT.format(token="first", extra=""))
        first = sweep.violations(page)
        page.set_content(SWEPT.format(token="second", extra=""))
        again = sweep.violations(page)
        # An image without a text alternative: a critical violation, which axe must be run to see.
        page.set_content(SWEPT.format(token="third", extra='<img src="data:,">'))
        changed = sweep.violations(page)
    finally:
        context.close()
    assert first == [] and again is first
    assert [v["id"] for v in changed] == ["image-alt"]
    assert sweep.runs == 2
