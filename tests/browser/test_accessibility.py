"""Every page, as every role sees it, passes axe-core with no critical, serious or moderate
violation, and fits a 390 px phone and a 1280 px screen without a sideways scroll of the page.

The rows come from the real engine, in-process against the simulated services (`sim`): a refund
waiting at a gate, an agent's open question, a trip stopped with its flight booked, a credit
stopped for a missing scope (the grant option), refunds that went through with audit items, a
decided gate in the decision log, and a policy draft. Then each role signs in through
the login form and opens every page of the product (a page a role may not open shows it the 403
or 404 page, which is checked too) and axe runs on it as it loaded: once per distinct document
(tests/browser/axe.py, `AxeSweep`), so the login form a signed-out sweep meets on every page is
examined once, not twenty times. Each page's width (`document.documentElement.scrollWidth`) is
measured at both sizes, with its folded details open: a wide table scrolls in its own box
(`.table-scroll`), never the page.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from agentops.models import Gate
from agentops.states import GateStatus
from policies.models import Policy
from policies.selectors import policy_version_active
from policies.services import policy_draft_create
from reviews.services import gate_approve
from tests.browser.axe import AxeSweep, axe_preloaded, axe_violations, described
from tests.browser.conftest import ACTION_TIMEOUT_MS, VIEWPORT, login
from tests.reviews.builders import asked_question, audited_refund, gated_refund, stopped_trip
from tests.reviews.conftest import make_user
from tests.reviews.test_grants import stopped_goodwill

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The roles of reviews/roles.py, policies/permissions.py and agentops/permissions.py, plus a
# signed-in user with none of them (a viewer), and nobody signed in.
ROLES = {
    "operator": ("olga", ("operators",)),
    "operator who starts tasks": ("stan", ("operators", "task starters")),
    "auditor": ("audrey", ("auditors",)),
    "policy admin": ("paula", ("policy admins", "task starters")),
    "scope granter": ("grace", ("operators", "scope granters")),
    "viewer": ("vic", ()),
    "anonymous": (None, ()),
}


POLICY_PAGES = {"policies", "policy", "published version", "draft", "dry run", "diff"}
REVIEW_PAGES = {
    "inbox",
    "audit queue",
    "gate panel",
    "question panel",
    "recovery panel",
    "grant panel",
}
TASK_PAGES = {"task at a gate", "stopped task", "finished task"}
# The pages each role is refused (403) or not shown (404: tasks that are not theirs); every
# other page answers 200, so each page is checked as some role uses it.
REFUSED = {
    "operator": POLICY_PAGES | {"start a task", "missing page"},
    "operator who starts tasks": POLICY_PAGES | {"missing page"},
    "scope granter": POLICY_PAGES | {"start a task", "missing page"},
    "auditor": POLICY_PAGES | {"start a task", "missing page"},
    "policy admin": REVIEW_PAGES | TASK_PAGES | {"missing page"},
    "viewer": POLICY_PAGES
    | REVIEW_PAGES
    | TASK_PAGES
    | {"start a task", "dashboard", "decision log", "missing page"},
    # Nobody signed in: every page sends them to the login form.
    "anonymous": set(),
}


# The widths every page must fit: a phone's and a laptop's.
WIDTHS = (390, 1280)
# On failure: the first elements sticking out of the viewport outside a scroll box.
WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > innerWidth + 1 && !e.closest('.table-scroll'))
  .slice(0, 6).map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`)"""


# Table headers with no text (axe counts an empty header as a minor violation only).
EMPTY_HEADERS = """() => [...document.querySelectorAll('th')]
  .filter(th => !th.textContent.trim()).length"""


# No htmx request in flight (htmx marks the element that sent one with `htmx-request`).
SETTLED = "() => document.querySelector('.htmx-request') === null"


@pytest.fixture
def pages(roles: None, sim: str, django_user_model: Any) -> dict[str, str]:
    """The product's pages over rows the engine made; name -> path."""
    users = {
        name: make_user(django_user_model, username, *groups)
        for name, (username, groups) in ROLES.items()
        if username is not None
    }
    stan, olga, paula = users["operator who starts tasks"], users["operator"], users["policy admin"]
    gated = gated_refund(created_by=stan)
    decided = gated_refund(created_by=stan, order_id="B2002", goal="Refund order B2002 again")
    decided_gate = Gate.objects.get(task=decided, status=GateStatus.OPEN)
    gate_approve(
        gate_id=decided_gate.pk, actor=olga, seen_digest=decided_gate.args_digest, reason="ok"
    )
    stopped = stopped_trip(created_by=stan)
    credit = stopped_goodwill(created_by=stan)
    question = asked_question(created_by=stan)
    done = audited_refund(created_by=stan)
    policy = Policy.objects.get(name="default")
    active = policy_version_active(policy.name)
    assert active is not None
    draft = policy_draft_create(policy=policy, author=paula)
    gate = Gate.objects.get(task=gated, status=GateStatus.OPEN)
    return {
        "login": "/login/",
        "task list": "/",
        "start a task": "/tasks/new",
        "task at a gate": f"/tasks/{gated.pk}",
        "stopped task": f"/tasks/{stopped.pk}",
        "finished task": f"/tasks/{done.pk}",
        "inbox": "/review/",
        "gate panel": f"/review/gates/{gate.pk}",
        "question panel": f"/review/questions/{question.pk}",
        "recovery panel": f"/review/tasks/{stopped.pk}/recover",
        "grant panel": f"/review/tasks/{credit.pk}/recover",
        "audit queue": "/review/audit",
        "decision log": "/review/decisions",
        "account": "/review/account",
        "dashboard": "/review/dashboard",
        "policies": "/policies/",
        "policy": f"/policies/{policy.pk}/",
        "published version": f"/policies/versions/{active.pk}/",
        "draft": f"/policies/versions/{draft.pk}/",
        "dry run": f"/policies/versions/{draft.pk}/dry-run",
        "diff": f"/policies/{policy.pk}/diff",
        "missing page": "/tasks/999999",
    }


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
    overflowing: list[str] = []
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
            # Folded details (the recovery panel's, the task page's) are checked open too.
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            violations = sweep.violations(page)
            if violations:
                found.append(f"{name} ({path}, {page.url}):")
                found.extend(f"  {line}" for line in described(violations))
            if page.evaluate(EMPTY_HEADERS):
                empty_headers.append(name)
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": VIEWPORT["height"]})
                wide = page.evaluate("() => document.documentElement.scrollWidth")
                if wide > width:
                    overflowing.append(f"{name} at {width} px: {wide} px {page.evaluate(WIDEST)}")
    finally:
        context.close()
    assert not found, f"axe-core, as {role}:\n" + "\n".join(found)
    assert not overflowing, f"pages wider than the screen, as {role}:\n" + "\n".join(overflowing)
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
