"""`demo_scenario rubric-review`: four 56 EUR refunds run on the worker; each queues its refund
(rule `small payment`) and its email (rule `notification`) for audit. Over the API a policy admin
(paula) defines the rubric `Refund quality` (pass/fail, a 1-3 score, a category) and attaches it
to the refund agent's refunds with two reviews per item and to its emails with three; auditors
(ann, ben, and cy for the emails) answer each item on their own (each first checks that the
others' answers are hidden from them), with scripted answers that disagree on some items; a
senior auditor (sam) settles every disputed item from the adjudication lane, with a correction.
Before answering, ann takes the refund items in a batch for ten minutes: ben's answer to one she
holds is refused (409) until she has answered it. At the end ann exports the reviewed items as
an evaluation dataset (JSON Lines).

The report gives each item with its reviews and case status, how many of the others' answers a
reviewer saw before submitting (0), the batch (items taken, the refusal while held, items still
held after the reviews: none), the dataset (lines, content type, lines with a correction, the
last line), the lane before and after, and the agreement per rubric item
the API computes: Cohen's kappa for the refunds (two reviewers), Krippendorff's alpha for the
emails (three). The agreement covers every review of the queues in the database, so the figures
are this run's on a fresh database.
"""

from __future__ import annotations

import json
from typing import Any

from agentops.dev.people import Api, Person, Wait, refund_task
from agentops.models import AuditItem
from agentops.states import TERMINAL

RUBRIC = "Refund quality"
RUBRIC_ITEMS: list[dict[str, Any]] = [
    {
        "key": "correct",
        "label": "The step did the right thing",
        "kind": "pass_fail",
        "values": [
            {"value": "pass", "description": "right order, amount and customer"},
            {"value": "fail", "description": "anything wrong in what it did"},
        ],
    },
    {
        "key": "tone",
        "label": "How the customer is treated",
        "kind": "score",
        "required": False,
        "values": [
            {"value": 1, "description": "curt or wrong"},
            {"value": 2, "description": "correct but cold"},
            {"value": 3, "description": "clear and kind"},
        ],
    },
    {
        "key": "cause",
        "label": "Why the customer asked",
        "kind": "category",
        "values": [
            {"value": "damage", "description": "the goods arrived damaged"},
            {"value": "delay", "description": "the goods arrived late"},
        ],
    },
]
# The queues: rule -> reviews per item and their reviewers.
QUEUES: dict[str, tuple[str, ...]] = {
    "small payment": ("ann", "ben"),
    "notification": ("ann", "ben", "cy"),
}
# Each reviewer's answers to the n-th item of a queue: (correct, tone, cause).
SCRIPT: dict[str, dict[str, list[tuple[str, int, str]]]] = {
    "small payment": {
        "ann": [
            ("pass", 3, "damage"),
            ("pass", 3, "delay"),
            ("fail", 2, "damage"),
            ("pass", 3, "delay"),
        ],
        "ben": [
            ("pass", 3, "damage"),
            ("pass", 3, "delay"),
            ("fail", 2, "damage"),
            ("fail", 2, "delay"),
        ],
    },
    "notification": {
        "ann": [
            ("pass", 3, "damage"),
            ("pass", 3, "delay"),
            ("fail", 1, "damage"),
            ("pass", 3, "delay"),
        ],
        "ben": [
            ("pass", 3, "damage"),
            ("pass", 2, "delay"),
            ("fail", 1, "damage"),
            ("pass", 3, "delay"),
        ],
        "cy": [
            ("pass", 3, "damage"),
            ("fail", 3, "delay"),
            ("fail", 2, "damage"),
            ("pass", 3, "delay"),
        ],
    },
}
REFUNDS = 4
CAST: dict[str, tuple[str, ...]] = {
    "ada": ("task starters",),
    "paula": ("policy admins",),
    "ann": ("auditors",),
    "ben": ("auditors",),
    "cy": ("auditors",),
    "sam": ("senior auditors",),
}


def _ok(answer: Any) -> Any:
    answer.raise_for_status()
    return answer.json()


def _rubric_ensure(api: Api, paula: Person) -> int:
    """The rubric's id: defined by paula, or the one a run before defined."""
    for rubric in _ok(api.call(paula, "GET", "/rubrics")):
        if rubric["name"] == RUBRIC:
            return int(rubric["id"])
    body = {
        "name": RUBRIC,
        "instructions": "Judge the step from its arguments and result.",
        "items": RUBRIC_ITEMS,
    }
    return int(_ok(api.call(paula, "POST", "/rubrics", body))["id"])


def _body(given: tuple[str, int, str]) -> dict[str, Any]:
    correct, tone, cause = given
    return {
        "answers": {"correct": correct, "tone": tone, "cause": cause},
        "verdict": "ok" if correct == "pass" else "flagged",
        "note": "" if correct == "pass" else "not what the customer was owed",
    }


def _answer(api: Api, person: Person, item_id: int, given: tuple[str, int, str]) -> dict[str, Any]:
    answered: dict[str, Any] = _ok(
        api.call(person, "POST", f"/audit/{item_id}/rubric", _body(given))
    )
    return answered


def run_rubric_review(
    *, api: Api, cast: dict[str, Person], wait: Wait, timeout: float
) -> dict[str, Any]:
    paula, sam = cast["paula"], cast["sam"]
    rubric_id = _rubric_ensure(api, paula)
    for rule, reviewers in QUEUES.items():
        body = {
            "agent": "refund",
            "rule": rule,
            "reviews_required": len(reviewers),
            "instructions": f"{len(reviewers)} independent reviews per item.",
        }
        _ok(api.call(paula, "POST", f"/rubrics/{rubric_id}/queues", body))
    tasks = [refund_task(starter=cast["ada"].user, order_id="A1001") for _ in range(REFUNDS)]
    statuses = [wait(task.pk, TERMINAL, timeout).status for task in tasks]
    ann, ben = cast["ann"], cast["ben"]
    items: dict[str, list[int]] = {
        rule: list(
            AuditItem.objects.filter(task__in=tasks, rule=rule)
            .order_by("task_id", "id")
            .values_list("pk", flat=True)
        )
        for rule in QUEUES
    }
    mine = {item_id for item_ids in items.values() for item_id in item_ids}
    # ann takes every free refund item for ten minutes; ben may not answer one she holds until
    # she has (her answer ends her hold on it).
    batch = _ok(
        api.call(ann, "POST", "/audit/batch", {"size": 50, "minutes": 10, "agent": "refund"})
    )
    first = items["small payment"][0]
    refused = api.call(
        ben, "POST", f"/audit/{first}/rubric", _body(SCRIPT["small payment"]["ben"][0])
    )
    seen_before = 0
    for rule, reviewers in QUEUES.items():
        for n, item_id in enumerate(items[rule]):
            for who in reviewers:
                before = _ok(api.call(cast[who], "GET", f"/audit/{item_id}/rubric"))
                seen_before += len(before["reviews"])
                _answer(api, cast[who], item_id, SCRIPT[rule][who][n])
    lane = _ok(api.call(sam, "GET", "/audit/adjudication"))
    lane_ids = [entry["item_id"] for entry in lane if entry["item_id"] in mine]
    for item_id in lane_ids:
        final = _ok(api.call(sam, "GET", f"/audit/{item_id}/rubric"))["reviews"][0]
        body = {
            "answers": final["answers"],
            "verdict": final["verdict"],
            "note": "settled: the first reviewer's reading holds",
            "correction": "the email should name the order and the amount refunded",
        }
        _ok(api.call(sam, "POST", f"/audit/{item_id}/adjudicate", body))
    lane_after = _ok(api.call(sam, "GET", "/audit/adjudication"))
    agreement = _ok(api.call(paula, "GET", "/rubrics/agreement"))
    held_after = [
        item["id"]
        for status in ("pending", "ok", "flagged")
        for item in _ok(api.call(ann, "GET", f"/audit?status={status}&limit=100"))
        if item["reserved_by"]
    ]
    exported = api.call(ann, "GET", "/audit/dataset?agent=refund")
    exported.raise_for_status()
    dataset = [
        line
        for line in (json.loads(text) for text in exported.text.splitlines())
        if line["item"] in mine
    ]
    return {
        "task_status": "succeeded" if set(statuses) == {"succeeded"} else ",".join(statuses),
        "rubric_id": rubric_id,
        "items": [
            _item_report(api, sam, rule, item_id)
            for rule, item_ids in items.items()
            for item_id in item_ids
        ],
        "answers_seen_before_submitting": seen_before,
        "batch_taken": len([i for i in batch["items"] if i in mine]),
        "refused_while_held": refused.status_code,
        "held_after_reviews": [i for i in held_after if i in mine],
        "dataset_lines": len(dataset),
        "dataset_content_type": exported.headers["content-type"],
        "dataset_with_correction": sum(1 for line in dataset if line["correction"]),
        "dataset_sample": dataset[-1] if dataset else None,
        "adjudication_lane": lane_ids,
        "adjudication_lane_after": [entry["item_id"] for entry in lane_after],
        "agreement": [q for q in agreement if q["agent"] == "refund" and q["rule"] in QUEUES],
    }


def _item_report(api: Api, person: Person, rule: str, item_id: int) -> dict[str, Any]:
    state = _ok(api.call(person, "GET", f"/audit/{item_id}/rubric"))
    return {
        "item_id": item_id,
        "rule": rule,
        "status": state["status"],
        "reviews": [
            {
                "reviewer": r["reviewer"],
                "adjudication": r["adjudication"],
                "answers": r["answers"],
                "verdict": r["verdict"],
            }
            for r in state["reviews"]
        ],
    }
