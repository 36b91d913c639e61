"""The dashboard in a real Chromium: a policy admin reads the figures built from known history,
sees the calibration proposal, and opens it as a policy draft that validates as it is."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from policies.models import PolicyRule, PolicyVersion
from policies.services import policy_default_install
from tests.browser.conftest import login, shoot
from tests.reviews.history import T0, Clock
from tests.reviews.test_calibration import refund_audits


def test_a_policy_admin_opens_the_proposal_from_audits_as_a_draft(
    page: Page, live_server: Any, policy_admin: Any, monkeypatch: pytest.MonkeyPatch
):
    policy_default_install()
    with monkeypatch.context() as clock_set:
        clock = Clock(T0)
        clock_set.setattr(timezone, "now", clock)
        refund_audits(clock)
    login(page, live_server, "paula")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Dashboard").click()
    page.get_by_label("From", exact=True).fill("2026-03-01")
    page.get_by_label("To", exact=True).fill("2026-03-07")
    page.get_by_role("button", name="Show").click()
    proposal = page.locator("[data-proposal='issue_refund']")
    expect(proposal).to_contain_text("gate issue_refund for refund when confidence < 0.82")
    expect(proposal).to_contain_text("caught 4 of 4 flagged items (100%)")
    expect(page.locator("[data-figure='audit_outcomes']")).to_contain_text("40%")
    shoot(page, "dashboard")
    proposal.get_by_role("button", name="Open as a policy draft").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("draft")
    expect(page.get_by_text("No problems found: this draft can be published.")).to_be_visible()
    draft = PolicyVersion.objects.get(status="draft")
    rule = PolicyRule.objects.get(version=draft, name__startswith="calibrated")
    assert (rule.route, rule.tools, rule.confidence_below) == ("gate", ["issue_refund"], 0.82)
    assert PolicyVersion.objects.filter(status="published").count() == 1
