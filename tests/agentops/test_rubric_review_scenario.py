"""`manage.py demo_scenario rubric-review`: real processes (the simulated services, a worker, the
sweeper and the web process); a policy admin, three auditors and a senior auditor act over the
API with their own tokens. Four refunds' audit items are answered with a rubric, independently;
disputed ones are settled; the agreement figures are the ones computed by hand."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agentops.models import AuditItem
from reviews.agreement import interval, krippendorff_alpha
from reviews.models import Decision
from tests.conftest import database_url
from tests.reviews.conftest import ensure_groups

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]


@pytest.fixture(autouse=True)
def roles(transactional_db: None) -> None:
    ensure_groups()


def test_rubric_review_reports_items_reviews_and_agreement(sim_server, redis_clean, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())
    out = StringIO()
    call_command("demo_scenario", "rubric-review", "--json", "--timeout", "120", stdout=out)
    report = json.loads(out.getvalue())

    assert report["task_status"] == "succeeded"
    assert report["answers_seen_before_submitting"] == 0
    # ann took the eight items in a batch; ben's answer to one she held was refused; her answers
    # ended her holds.
    assert report["batch_taken"] == 8 and report["refused_while_held"] == 409
    assert report["held_after_reviews"] == []
    # The dataset: the eight reviewed items, the three adjudicated ones with a correction.
    assert report["dataset_lines"] == 8
    assert report["dataset_content_type"].startswith("application/x-ndjson")
    assert report["dataset_with_correction"] == 3
    sample = report["dataset_sample"]
    assert sample["inputs"]["task_input"]["order_id"] == "A1001"
    assert sample["output"] is not None and sample["rubric"] == "Refund quality"
    assert sample["answers"] == {"correct": "pass", "tone": 3, "cause": "delay"}
    by_rule: dict[str, list[dict]] = {}
    for item in report["items"]:
        by_rule.setdefault(item["rule"], []).append(item)
    assert [i["status"] for i in by_rule["small payment"]] == ["agreed"] * 3 + ["adjudicated"]
    assert [i["status"] for i in by_rule["notification"]] == [
        "agreed",
        "adjudicated",
        "adjudicated",
        "agreed",
    ]
    assert [len(i["reviews"]) for i in by_rule["notification"]] == [3, 4, 4, 3]
    assert len(report["adjudication_lane"]) == 3 and report["adjudication_lane_after"] == []
    refunds, emails = (
        {q["rule"]: q for q in report["agreement"]}[rule]
        for rule in ("small payment", "notification")
    )
    kappa = {i["key"]: i for i in refunds["items"]}
    alpha = {i["key"]: i for i in emails["items"]}
    # Two reviewers: ann p p f p / ben p p f f: p_o 3/4, p_e 1/2, kappa 1/2 (tone alike).
    assert {k: (v["measure"], v["value"]) for k, v in kappa.items()} == {
        "correct": ("cohen_kappa", 0.5),
        "tone": ("cohen_kappa", 0.5),
        "cause": ("cohen_kappa", 1.0),
    }
    # Three reviewers, `correct` per item {ppp} {ppf} {fff} {ppp}: coincidences pp 7, pf 1, fp 1,
    # ff 3; n_p 8, n_f 4; D_o = 2/12, D_e = 2*8*4/(12*11); alpha = 1 - 0.34375 = 0.65625.
    assert alpha["correct"]["measure"] == "krippendorff_alpha"
    assert alpha["correct"]["value"] == pytest.approx(0.65625, abs=1e-4)
    assert alpha["tone"]["value"] == pytest.approx(
        krippendorff_alpha([[3, 3, 3], [3, 2, 3], [1, 1, 2], [3, 3, 3]], difference=interval),
        abs=1e-4,
    )
    assert alpha["cause"]["value"] == pytest.approx(1.0)
    assert (refunds["cases"], refunds["disputed"], emails["cases"], emails["disputed"]) == (
        4,
        1,
        4,
        2,
    )
    # Every item of the two queues is settled (a sampled read of the `auto` lane, if the policy's
    # sampling picked one, is under no rubric and stays to review).
    ids = [item["item_id"] for item in report["items"]]
    assert len(ids) == 8
    assert AuditItem.objects.filter(pk__in=ids, status="pending").count() == 0
    logged = Decision.objects.filter(action__startswith="reviews.rubric.")
    assert logged.filter(action="reviews.rubric.answered", channel="api").count() == 4 * 2 + 4 * 3
    assert logged.filter(action="reviews.rubric.adjudicated").count() == 3
    assert logged.filter(action="reviews.rubric.attached").count() == 2
    assert Decision.objects.filter(action="reviews.reservation.taken").count() == 1
