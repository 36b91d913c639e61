"""The sweeps over every page of the product as every role meets it: the rows they show, the roles,
the pages each role is refused, and the width check. tests/browser/test_accessibility.py (axe-core)
and tests/browser/test_chinese.py (no English left in zh-Hans) walk the same pages, so a page added
here is checked by both.

The rows come from the real engine, in-process against the simulated services (`sim`): a refund
waiting at a gate, an agent's open question, a trip stopped with its flight booked, a credit
stopped for a missing scope (the grant option), refunds that went through with audit items (one
of them under a rubric), a decided gate in the decision log, and a policy draft.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import Permission
from playwright.sync_api import Page

from agentops.models import AuditItem, Gate
from agentops.states import GateStatus
from policies.models import Policy
from policies.selectors import policy_version_active
from policies.services import policy_draft_create
from reviews.services import gate_approve, rubric_create, rubric_queue_attach
from tests.browser.conftest import PASSWORD, VIEWPORT
from tests.reviews.builders import asked_question, audited_refund, gated_refund, stopped_trip
from tests.reviews.conftest import make_user
from tests.reviews.test_grants import stopped_goodwill
from tests.reviews.test_rubrics import ITEMS

# The roles of reviews/roles.py, policies/permissions.py and agentops/permissions.py, plus a
# signed-in user with none of them (a viewer), and nobody signed in.
ROLES = {
    "operator": ("olga", ("operators",)),
    # The stop button is given to a person (the one on call), not to a group.
    "operator on call": ("stella", ("operators",)),
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
    "rubric review",
    "adjudication",
}
TASK_PAGES = {"task at a gate", "stopped task", "finished task"}
# Pages for the readers of the dashboard: the roles that review, and policy admins.
READER_PAGES = {"dashboard", "oversight report", "rubrics"}
# The pages each role is refused (403) or not shown (404: tasks that are not theirs); every
# other page answers 200, so each page is checked as some role uses it.
REFUSED = {
    "operator": POLICY_PAGES | {"start a task", "fleet stops", "missing page"},
    "operator on call": POLICY_PAGES | {"start a task", "missing page"},
    "operator who starts tasks": POLICY_PAGES | {"fleet stops", "missing page"},
    "scope granter": POLICY_PAGES | {"start a task", "fleet stops", "missing page"},
    "auditor": POLICY_PAGES | {"start a task", "fleet stops", "missing page"},
    "policy admin": REVIEW_PAGES | TASK_PAGES | {"fleet stops", "missing page"},
    "viewer": POLICY_PAGES
    | REVIEW_PAGES
    | TASK_PAGES
    | READER_PAGES
    | {"start a task", "decision log", "fleet stops", "missing page"},
    # Nobody signed in: every page sends them to the login form.
    "anonymous": set(),
}

# The widths every page must fit: a phone's and a laptop's.
WIDTHS = (390, 1280)
# On failure: the first elements sticking out of the viewport outside a scroll box.
WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > innerWidth + 1 && !e.closest('.table-scroll'))
  .slice(0, 6).map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`)"""
# No htmx request in flight (htmx marks the element that sent one with `htmx-request`).
SETTLED = "() => document.querySelector('.htmx-request') === null"
# Folded details (the recovery panel's, the task page's) are checked open too.
DETAILS_OPEN = "() => document.querySelectorAll('details').forEach(d => d.open = true)"


def pages_made(django_user_model: Any) -> dict[str, str]:
    """The product's pages over rows the engine made, and one user per role; name -> path.
    Needs the role groups (the `roles` fixture) and the simulated services (`sim`)."""
    users = {
        name: make_user(django_user_model, username, *groups)
        for name, (username, groups) in ROLES.items()
        if username is not None
    }
    users["operator on call"].user_permissions.add(Permission.objects.get(codename="stop_fleet"))
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
    rubric_item = _under_a_rubric(audited_refund(created_by=stan, goal="Refund A1001 again"), paula)
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
        "rubric review": f"/review/audit/{rubric_item.pk}/rubric",
        "adjudication": "/review/audit/adjudication",
        "rubrics": "/review/rubrics",
        "decision log": "/review/decisions",
        "account": "/review/account",
        "dashboard": "/review/dashboard",
        "oversight report": "/review/oversight",
        "fleet stops": "/review/stops",
        "policies": "/policies/",
        "policy": f"/policies/{policy.pk}/",
        "published version": f"/policies/versions/{active.pk}/",
        "draft": f"/policies/versions/{draft.pk}/",
        "dry run": f"/policies/versions/{draft.pk}/dry-run",
        "diff": f"/policies/{policy.pk}/diff",
        "missing page": "/tasks/999999",
    }


def _under_a_rubric(task: Any, admin: Any) -> AuditItem:
    """An audit item of `task` that a rubric applies to (attached to the refund agent's queue
    before anyone reviewed it)."""
    item = AuditItem.objects.filter(task=task).order_by("pk").first()
    assert item is not None
    rubric = rubric_create(actor=admin, name="Refund quality", items=ITEMS)
    rubric_queue_attach(
        actor=admin,
        rubric_id=rubric.pk,
        agent=item.agent,
        instructions="Read the refund and its email.",
        reviews_required=2,
    )
    return item


def overflowing(page: Page, name: str, *, at_each: Callable[[], object] | None = None) -> list[str]:
    """The widths (of WIDTHS) at which `page` is wider than the screen, each with its widest
    elements; `at_each` is called at each width too (to read the page as laid out there). The
    viewport is left at VIEWPORT's size."""
    found = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": VIEWPORT["height"]})
        if at_each is not None:
            at_each()
        wide = page.evaluate("() => document.documentElement.scrollWidth")
        if wide > width:
            found.append(f"{name} at {width} px: {wide} px {page.evaluate(WIDEST)}")
    page.set_viewport_size(VIEWPORT)
    return found


def signed_in_by_form(page: Page, username: str) -> None:
    """Sign in through the login form whatever language it is in (the fields by name); fails
    unless the page then names the user in its header."""
    page.goto("/login/")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("form[action='/login/'] button[type=submit]").click()
    page.locator(".account .user").wait_for()
    assert page.locator(".account .user").inner_text().strip() == username
