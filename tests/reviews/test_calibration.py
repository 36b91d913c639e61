"""Calibration from audits: flag rates per rule, agent and lane, the confidence of flagged and
accepted items, and the policy draft proposed when a lane's flag rate is too high (an ordinary
draft: nothing publishes itself)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import translation

from agentops.metrics import Window
from policies.engine import Action, evaluate
from policies.models import PolicyRule, PolicyVersion
from policies.selectors import policy_spec_of, policy_version_active, policy_version_validate
from policies.services import policy_version_ensure_active
from reviews.calibration import calibration
from reviews.services import NotAllowed, calibration_draft_create
from tests.reviews.builders import client_for
from tests.reviews.history import T0, make_audit_item, make_call, make_step, make_task

pytestmark = pytest.mark.django_db

WEEK = Window(since=datetime(2026, 3, 1, tzinfo=UTC), until=datetime(2026, 3, 8, tzinfo=UTC))
FLAGGED = (0.55, 0.62, 0.7, 0.81)
ACCEPTED = (0.83, 0.9, 0.91, 0.95, 0.97, 0.99)


def refund_audits(clock):
    task = make_task(clock)
    for conf in FLAGGED:
        make_audit_item(clock, task, status="flagged", confidence=conf)
    for conf in ACCEPTED:
        make_audit_item(clock, task, status="ok", confidence=conf)
    # Sampled auto decisions of the same tool, all accepted, and one not yet reviewed.
    for conf in (0.88, 0.93):
        make_audit_item(clock, task, route="auto", sampled=True, status="ok", confidence=conf)
    make_audit_item(clock, task, status="pending", confidence=0.1)
    # An autonomous refund nobody audited, below the threshold: the proposal would gate it too.
    step = make_step(task, 99, confidence=0.5, rule="small payment", route="audit")
    make_call(clock, task, step, at=T0 + timedelta(days=1))
    return task


def test_flag_rates_by_lane_and_confidence_of_flagged_and_accepted_items(clock):
    refund_audits(clock)

    (row,) = calibration(WEEK)

    assert (row.rule, row.agent, row.tool) == ("small payment", "refund", "issue_refund")
    assert row.lanes == {"audit": (10, 4), "sampled auto": (2, 0)}
    assert row.flag_rate("audit") == pytest.approx(0.4)
    assert row.flag_rate("sampled auto") == 0
    assert row.confidence["flagged"] == {"0.5-0.6": 1, "0.6-0.7": 1, "0.7-0.8": 1, "0.8-0.9": 1}
    assert row.confidence["accepted"] == {"0.8-0.9": 2, "0.9-1.0": 6}


def test_a_high_flag_rate_proposes_the_lowest_threshold_catching_the_flagged_items(clock):
    refund_audits(clock)

    proposal = calibration(WEEK)[0].proposal

    assert proposal is not None
    assert proposal.lane == "audit"
    assert proposal.threshold == 0.82
    assert (proposal.caught, proposal.flagged) == (4, 4)
    # Below 0.82: the four flagged refunds, the one still to review (0.1) and the unaudited one
    # (0.5), over 7 days.
    assert proposal.extra_gates_per_day == round(6 / 7, 2)
    assert proposal.sentence.startswith("gate issue_refund for refund when confidence < 0.82")


def test_the_catch_target_sets_the_threshold(clock):
    refund_audits(clock)

    proposal = calibration(WEEK, catch=0.5)[0].proposal

    assert proposal.threshold == 0.63
    assert proposal.caught == 2


def test_no_proposal_below_the_flag_rate_or_with_too_few_reviews(clock):
    refund_audits(clock)

    assert calibration(WEEK, flag_rate=0.5)[0].proposal is None
    assert calibration(WEEK, min_reviewed=11)[0].proposal is None


def test_an_admin_opens_the_proposal_as_a_draft_and_nothing_is_published(clock, policy_admin):
    active = policy_version_ensure_active()
    refund_audits(clock)
    published = PolicyVersion.objects.filter(status="published").count()

    response = client_for(policy_admin).post(
        reverse("reviews:calibration_draft"),
        {"rule": "small payment", "agent": "refund", "tool": "issue_refund", "threshold": "0.82"},
    )

    draft = PolicyVersion.objects.filter(status="draft").latest("id")
    assert response.status_code == 302
    assert response["Location"] == reverse("policies:version_detail", args=[draft.pk])
    assert PolicyVersion.objects.filter(status="published").count() == published
    assert policy_version_active("default") == active
    rules = list(PolicyRule.objects.filter(version=draft).order_by("position"))
    names = [r.name for r in rules]
    added = rules[names.index("small payment") - 1]
    assert (added.route, added.tools, added.agents) == ("gate", ["issue_refund"], ["refund"])
    assert added.confidence_below == 0.82
    # Ready to dry-run and publish: the gate has the default rule's approvers and timeout.
    assert (added.approver_group, added.timeout_seconds) == ("operators", 3600)
    assert not [m for m in policy_version_validate(draft) if m.is_error]
    spec = policy_spec_of(draft)
    unsure = Action(
        tool="issue_refund", side_effect="financial", amount=50, confidence=0.8, agent="refund"
    )
    sure = Action(
        tool="issue_refund", side_effect="financial", amount=50, confidence=0.9, agent="refund"
    )
    assert evaluate(spec, unsure).route == "gate"
    assert evaluate(spec, sure).route == "audit"


def test_only_policy_admins_open_drafts(operator):
    policy_version_ensure_active()

    with pytest.raises(NotAllowed):
        calibration_draft_create(
            actor=operator,
            rule="small payment",
            agent="refund",
            tool="issue_refund",
            threshold=0.82,
        )


def test_the_dashboard_lists_the_proposal_with_a_button_for_admins(clock, policy_admin, auditor):
    refund_audits(clock)
    url = reverse("reviews:dashboard") + "?date_from=2026-03-01&date_to=2026-03-07"

    admin_page = client_for(policy_admin).get(url).content.decode()
    auditor_page = client_for(auditor).get(url).content.decode()

    # The values are kept as written in the sentence (the tool's and the agent's names).
    proposal = (
        'gate <span translate="no">issue_refund</span> for <span translate="no">refund</span> '
        'when confidence &lt; <span translate="no">0.82</span>'
    )
    assert proposal in admin_page
    assert 'name="threshold" value="0.82"' in admin_page
    assert proposal in auditor_page
    assert reverse("reviews:calibration_draft") not in auditor_page


def test_the_proposal_is_english_in_the_export_whoever_asks_and_theirs_on_a_page(clock):
    # The JSON export's `text` and the report command's line are the record's English, like the
    # reviewers' flags beside them; a page renders the same sentence in the reader's language.
    refund_audits(clock)

    with translation.override("zh-hans"):
        proposal = calibration(WEEK)[0].proposal
        assert proposal is not None
        exported = str(proposal.sentence)
        page = proposal.sentence_html

    assert exported.startswith("gate issue_refund for refund when confidence < 0.82")
    assert not page.startswith("gate ")
    assert '<span translate="no">issue_refund</span>' in page
