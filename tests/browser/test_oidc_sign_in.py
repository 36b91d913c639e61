"""Each role signs in through the identity provider's own sign-in page (the real oidc-provider of
tests/oidc_provider.py) in Chromium, and lands with the access of that role: a page the role may
open answers 200, one it may not answers 403. The roles come only from the provider's groups
(AGENTOPS_OIDC_GROUPS_MAP): nobody exists in the product before signing in."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from playwright.sync_api import Browser, expect

from tests.browser.axe import axe_preloaded, axe_violations, described
from tests.browser.conftest import ACTION_TIMEOUT_MS, VIEWPORT, csp_watched, shoot
from tests.oidc_provider import PASSWORD, PROVIDER_NAME

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# role: (the person at the provider, their provider groups, a page only the role (among these)
# may open, a page it may not).
ROLES = {
    "operator": ("olga", ["agentops-operators"], "reviews:inbox", "policies:index"),
    "auditor": ("audrey", ["agentops-auditors"], "reviews:audit", "agentops:task_new"),
    "senior auditor": (
        "sam",
        ["agentops-senior-auditors"],
        "reviews:adjudication",
        "policies:index",
    ),
    "policy admin": ("paula", ["agentops-policy-admins"], "policies:index", "reviews:inbox"),
    "scope granter": ("grace", ["agentops-scope-granters"], "agentops:task_list", "reviews:inbox"),
    "task starter": ("stan", ["agentops-task-starters"], "agentops:task_new", "reviews:inbox"),
    "viewer": ("vic", [], "agentops:task_list", "reviews:dashboard"),
}


def test_each_role_signs_in_at_the_provider_and_lands_with_its_access(
    chromium: Browser, live_server: Any, roles: None, oidc_settings: Any, oidc_provider: Any
) -> None:
    for login, groups, _, _ in ROLES.values():
        oidc_provider.person_set(login, groups=groups)
    failures = []
    for role, (login, _, allowed, refused) in ROLES.items():
        context = chromium.new_context(viewport=VIEWPORT, base_url=live_server.url)
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        violations = csp_watched(context)
        page = context.new_page()
        try:
            page.goto("/login/")
            page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
            page.get_by_label("Username").fill(login)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in to the provider").click()
            expect(page.get_by_title(f"Signed in as {login}")).to_have_text(login)
            opened = page.goto(reverse(allowed))
            kept_out = page.goto(reverse(refused))
            answers = (opened.status if opened else None, kept_out.status if kept_out else None)
            if answers != (200, 403):
                shoot(page, f"oidc-{login}")
                failures.append(f"{role}: {allowed} and {refused} answered {answers}")
        finally:
            context.close()
        assert violations == [], f"the Content-Security-Policy blocked: {violations}"

    assert failures == []
    people = get_user_model().objects.filter(username__in=[login for login, *_ in ROLES.values()])
    assert people.count() == len(ROLES)
    assert all(not person.has_usable_password() for person in people)


def test_signing_out_ends_the_providers_session_too(
    chromium: Browser, live_server: Any, roles: None, oidc_settings: Any, oidc_provider: Any
) -> None:
    """The Log out form's redirect to the provider's end-session endpoint is a form's redirect,
    which the Content-Security-Policy's form-action must allow: after it, signing in again asks
    for the password at the provider."""
    oidc_provider.person_set("otto", groups=["agentops-operators"])
    context = chromium.new_context(viewport=VIEWPORT, base_url=live_server.url)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    violations = csp_watched(context)
    page = context.new_page()
    try:
        page.goto("/login/")
        page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
        page.get_by_label("Username").fill("otto")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in to the provider").click()
        expect(page.get_by_title("Signed in as otto")).to_have_text("otto")

        page.get_by_role("button", name="Log out").click()
        page.get_by_role("button", name="Sign out of the provider").click()
        expect(page).to_have_url(f"{live_server.url}{reverse('login')}")
        page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
        expect(page.get_by_label("Password")).to_have_count(1)
    except Exception:
        shoot(page, "oidc-sign-out")
        raise
    finally:
        context.close()

    assert violations == [], f"the Content-Security-Policy blocked: {violations}"


def test_the_login_page_with_single_sign_on_passes_axe_with_and_without_passwords(
    chromium: Browser, live_server: Any, oidc_settings: Any
) -> None:
    found = {}
    for passwords in (True, False):
        oidc_settings.AGENTOPS = {**oidc_settings.AGENTOPS, "LOCAL_PASSWORDS": passwords}
        context = axe_preloaded(chromium.new_context(viewport=VIEWPORT, base_url=live_server.url))
        page = context.new_page()
        page.goto("/login/")
        expect(page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}")).to_be_visible()
        expect(page.get_by_label("Password")).to_have_count(1 if passwords else 0)
        found[passwords] = described(axe_violations(page))
        context.close()

    assert found == {True: [], False: []}
