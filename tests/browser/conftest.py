"""Fixtures of the browser tests: one Chromium per session, a fresh context per test, role users
who log in through the real login form, and a folder for screenshots.

Chromium is Debian's, in its headless shell (`chromium-headless-shell`, installed by `.ci/run`):
the same Blink and V8 as Debian's `chromium`, without the desktop browser's layers around them,
which is what Playwright itself launches for headless Chromium (its `chromium-headless-shell`
download) and about 2.5 times less CPU per page load than `chromium --headless` here (0.04 s
against 0.1 s). Playwright's own download is not used, and a Chromium that cannot start fails
the tests instead of skipping them. The web app is pytest-django's `live_server` on the test
database; workers and the sweeper come from the `processes` fixture and see the same rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.conftest import ROOT
from tests.reviews.conftest import ensure_groups, make_user

CHROMIUM = "/usr/bin/chromium-headless-shell"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
PASSWORD = "pw-for-tests"  # what `tests.reviews.conftest.make_user` sets
# Waits for a worker to act (boot included) and for a page to catch up with it, and for an
# element to be ready for an action. They bound a wait for something that does happen (a test
# that waits them out fails), so they are sized for a loaded machine (a load average of 30 on
# two cores, where a click's page took over 10 s), not for a quiet one, where each wait ends in
# well under a second.
WORKER_TIMEOUT_MS = 120_000
ACTION_TIMEOUT_MS = 60_000
# An assertion on the page waits on a clock of its own (Playwright's 5 s unless told), not the
# context's: it waits as long as an action may (a form post took more than 5 s at a load of 23).
expect.set_options(timeout=ACTION_TIMEOUT_MS)

_written: list[Path] = []


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    # Playwright's sync API runs an event loop in this thread, which Django would otherwise
    # take for an async context and refuse ORM calls from; `make test` sets it too.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    # Screenshots of an earlier run (a failure's especially) must not pass for this run's.
    for old in SCREENSHOTS.glob("*.png"):
        old.unlink(missing_ok=True)  # another xdist worker may have just removed it
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


# Every document of a test's browser context reports what the Content-Security-Policy blocked
# (the DOM's `securitypolicyviolation` event, not the browser's console wording); the script is
# the browser's own, injected before the page's, so the policy does not apply to it.
CSP_WATCH = (
    "document.addEventListener('securitypolicyviolation', event => "
    "window.agentopsCspViolation(`${event.violatedDirective} ${event.blockedURI}`));"
)


def csp_watched(context: BrowserContext) -> list[str]:
    """The violations of the context's pages, as they happen."""
    violations: list[str] = []
    context.expose_function("agentopsCspViolation", lambda seen: violations.append(seen))
    context.add_init_script(CSP_WATCH)
    return violations


@pytest.fixture
def page(chromium: Browser, live_server: Any, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A page in a fresh browser context (own cookies); on failure its last state is saved.
    Anything the Content-Security-Policy blocked on its pages fails the test."""
    context = chromium.new_context(
        viewport=VIEWPORT, base_url=live_server.url, accept_downloads=True
    )
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    violations = csp_watched(context)
    page = context.new_page()
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        shoot(page, f"failed-{request.node.name}")
    context.close()
    assert violations == [], f"the Content-Security-Policy blocked: {violations}"


@pytest.fixture
def second_page(chromium: Browser, live_server: Any) -> Iterator[Page]:
    """Another person's page, signed in separately from `page`."""
    context = chromium.new_context(viewport=VIEWPORT, base_url=live_server.url)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    violations = csp_watched(context)
    yield context.new_page()
    context.close()
    assert violations == [], f"the Content-Security-Policy blocked: {violations}"


def shoot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as `<name>.png` in the screenshot folder and print where."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    _written.append(path)
    print(f"screenshot: {path}")
    return path


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _written:
        terminalreporter.write_line(f"browser screenshots in {SCREENSHOTS}:")
        for path in _written:
            terminalreporter.write_line(f"  {path.name}")


def login(page: Page, live_server: Any, username: str, password: str = PASSWORD) -> None:
    """Sign in through the login form; fails unless the page then shows the user as signed in."""
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_title(f"Signed in as {username}")).to_have_text(username)


@pytest.fixture
def roles(transactional_db: Any) -> None:
    ensure_groups()


@pytest.fixture
def operator(roles: None, django_user_model: Any) -> Any:
    return make_user(django_user_model, "olga", "operators")


@pytest.fixture
def starter(roles: None, django_user_model: Any) -> Any:
    """The operator who starts tasks, so that separation of duties leaves the gates to olga."""
    return make_user(django_user_model, "stan", "operators", "task starters")


@pytest.fixture
def auditor(roles: None, django_user_model: Any) -> Any:
    return make_user(django_user_model, "audrey", "auditors")


@pytest.fixture
def policy_admin(roles: None, django_user_model: Any) -> Any:
    """A policy admin who also starts tasks (to try a policy she published)."""
    return make_user(django_user_model, "paula", "policy admins", "task starters")
