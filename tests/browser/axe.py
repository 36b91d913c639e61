"""axe-core in the browser tests: run the vendored engine on a page and keep the violations
that block or hinder people (impact critical, serious or moderate; minor ones are left out).

axe-core is vendored under tests/browser/vendor/axe-core (version and licence in its README):
the tests inject it into the page under test with Playwright (a sweep over many pages, once per
browser context, as a script Chromium runs in each document it opens), so no CDN is reached at
test time and the product never serves it. Every rule axe runs by default applies (WCAG 2.0,
2.1 and 2.2 A and AA, and best practices); none is disabled.

A sweep over many pages (`AxeSweep`) runs axe once per distinct document: what axe examines is the
document, not its address, and a role's sweep meets the same one many times (every page is the
login form for someone signed out, the 403 page for a role refused it). Two documents count as
the same when they differ only in what nobody sees and no rule reads: the values of hidden inputs
(a CSRF token, the login form's `next`) and htmx's request headers (the CSRF token again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, Page

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
AXE_VERSION = "4.14.1"
BLOCKING = ("critical", "serious", "moderate")


def axe_preloaded(context: BrowserContext) -> BrowserContext:
    """`context`, with axe-core loaded into every document it opens from now on: the engine goes
    to Chromium once per context, not once per page (`axe_violations` injects it otherwise)."""
    context.add_init_script(path=str(AXE))
    return context


# The document as axe sees it, without the per-response values nobody sees (module docstring).
SHOWN_DOCUMENT = """() => {
  const copy = document.documentElement.cloneNode(true);
  copy.querySelectorAll('input[type=hidden]').forEach(input => input.removeAttribute('value'));
  copy.querySelectorAll('[hx-headers]').forEach(element => element.removeAttribute('hx-headers'));
  return copy.outerHTML;
}"""


class AxeSweep:
    """axe-core over a sweep of pages: run once per distinct document, its violations given again
    for a document met before. `runs` counts the documents axe examined."""

    def __init__(self) -> None:
        self.runs = 0
        self._violations: dict[str, list[dict[str, Any]]] = {}

    def violations(self, page: Page) -> list[dict[str, Any]]:
        document = page.evaluate(SHOWN_DOCUMENT)
        if document not in self._violations:
            self._violations[document] = axe_violations(page)
            self.runs += 1
        return self._violations[document]


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """The critical, serious and moderate violations axe finds on the page as it is now. Pages
    of the site refuse inline scripts (their Content-Security-Policy): preload axe in their
    context (`axe_preloaded`); the inline fallback is for pages made by a test (`set_content`)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    assert page.evaluate("() => axe.version") == AXE_VERSION
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [v for v in result["violations"] if v["impact"] in BLOCKING]


def described(violations: list[dict[str, Any]], *, limit: int = 3) -> list[str]:
    """One line per violation and up to `limit` of its elements, with axe's own summary."""
    lines = []
    for violation in violations:
        lines.append(f"{violation['impact']} {violation['id']}: {violation['help']}")
        for node in violation["nodes"][:limit]:
            summary = " ".join((node.get("failureSummary") or "").split())
            lines.append(f"    {' '.join(node['target'])}: {summary[:300]}")
        if len(violation["nodes"]) > limit:
            lines.append(f"    ... and {len(violation['nodes']) - limit} more")
    return lines
