"""Every page, as every role sees it, passes axe-core with no critical, serious or moderate
violation, and fits a 390 px phone and a 1280 px screen without a sideways scroll of the page.

The pages, their rows and the roles are tests/browser/sweep.py's (test_chinese.py walks the same).
Each role signs in through the login form and opens every page of the product (a page a role may
not open shows it the 403 or 404 page, which is checked too) and axe runs on it as it loaded: once
per distinct document (tests/browser/axe.py, `AxeSweep`), so the login form a signed-out sweep
meets on every page is examined once, not twenty times. Each page's width
(`document.documentElement.scrollWidth`) is measured at both sizes, with its folded details open:
a wide table scrolls in its own box (`.table-scroll`), never the page."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.axe import AxeSweep, axe_preloaded, axe_violations, described
from tests.browser.conftest import ACTION_TIMEOUT_MS, VIEWPORT, login
from tests.browser.sweep import DETAILS_OPEN, REFUSED, ROLES, SETTLED, overflowing, pages_made
from tests.reviews.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Table headers with no text (axe counts an empty header as a minor violation only).
EMPTY_HEADERS = """() => [...document.querySelectorAll('th')]
  .filter(th => !th.textContent.trim()).length"""


@pytest.fixture
def pages(roles: None, sim: str, django_user_model: Any) -> dict[str, str]:
    """The product's pages over rows the engine made; name -> path."""
    return pages_made(django_user_model)


@pytest.mark.parametrize("role", list(ROLES))
def test_every_page_has_no_accessibility_violation_and_fits_a_phone_and_a_laptop(
    chromium: Browser, live_server: Any, pages: dict[str, str], role: str
):
    context = chromium.new_context(viewport=VIEWPORT, base_url=live_server.url)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    username = ROLES[role][0]
    if username is not None:
        login(page, live_server, username)
    axe_preloaded(context)  # in each page of the sweep, not in the sign-in's
    found: list[str] = []
    overflowing_pages: list[str] = []
    empty_headers: list[str] = []
    statuses: dict[str, int] = {}
    sweep = AxeSweep()
    try:
        for name, path in pages.items():
            page.set_viewport_size(VIEWPORT)
            response = page.goto(path)
            assert response is not None
            statuses[name] = response.status
            if username is None:
                assert page.url.startswith(f"{live_server.url}/login/"), page.url
            # Loaded (`goto` waits for the load event) and no htmx request in flight: what the
            # page shows is all there (no part of a page loads later), polls included.
            page.wait_for_function(SETTLED)
            page.evaluate(DETAILS_OPEN)
            violations = sweep.violations(page)
            if violations:
                found.append(f"{name} ({path}, {page.url}):")
                found.extend(f"  {line}" for line in described(violations))
            if page.evaluate(EMPTY_HEADERS):
                empty_headers.append(name)
            overflowing_pages.extend(overflowing(page, name))
    finally:
        context.close()
    assert not found, f"axe-core, as {role}:\n" + "\n".join(found)
    assert not overflowing_pages, f"pages wider than the screen, as {role}:\n" + "\n".join(
        overflowing_pages
    )
    assert not empty_headers, f"table headers with no text, as {role}: {empty_headers}"
    assert {name for name, status in statuses.items() if status != 200} == REFUSED[role]


def test_forms_showing_their_errors_have_no_serious_accessibility_violation(
    chromium: Browser, live_server: Any, roles: None, django_user_model: Any
):
    make_user(django_user_model, "stan", "operators", "task starters")
    context = axe_preloaded(chromium.new_context(viewport=VIEWPORT, base_url=live_server.url))
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    found: list[str] = []
    try:
        # A wrong password: the login form's error.
        page.goto("/login/")
        page.get_by_label("Username").fill("stan")
        page.get_by_label("Password").fill("not the password")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("alert").first).to_be_visible()
        found.extend(described(axe_violations(page)))
        # The start form sent with input that is not JSON: its field errors, swapped by htmx.
        login(page, live_server, "stan")
        page.goto("/tasks/new")
        page.get_by_label("Goal").fill("Refund order A1001")
        page.get_by_label("Input").fill("{not json")
        page.get_by_role("button", name="Start task").click()
        expect(page.locator(".error p").first).to_be_visible()
        found.extend(described(axe_violations(page)))
    finally:
        context.close()
    assert not found, "\n".join(found)
