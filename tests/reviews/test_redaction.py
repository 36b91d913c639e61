"""No secret from the corpus reaches any stored row or rendered page.

Secrets enter as task input (under secret-looking keys and inside free text), in the goal, in a
reviewer's rejection feedback and in an auditor's note; the task then runs to the end.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.core import serializers
from django.urls import reverse

from agentops.models import AuditItem
from agentops.services import task_create
from agentops.states import AuditStatus
from reviews.services import audit_item_review, gate_reject
from tests.agentops.test_runner import run_until_parked_or_done
from tests.reviews.builders import client_for, open_gate

pytestmark = pytest.mark.django_db(transaction=True)

CORPUS = {
    "openai": "sk-proj-4f9Qm2XbT7vLw8RcZ1yN3kPd",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "slack": "xoxb-2048-1234567890-abcDEFghiJKL",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "password": "correct-horse-battery-staple",
    "card": "4111 1111 1111 1111",
    "card-dashes": "5500-0000-0000-0004",
    "private-key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
}


def dump_everything() -> str:
    """Every row of every model of the project's apps, as JSON text."""
    chunks = []
    for label in ("agentops", "reviews", "policies", "sim"):
        for model in apps.get_app_config(label).get_models():
            chunks.append(serializers.serialize("json", model.objects.all()))
    return "\n".join(chunks)


def leaks(text: str) -> list[str]:
    return [name for name, secret in CORPUS.items() if secret in text]


def test_no_secret_of_the_corpus_is_stored_or_rendered(
    sim_server, redis_clean, operator, auditor, starter
):
    private_key = (
        "-----BEGIN PRIVATE KEY-----\n" + CORPUS["private-key"] + "\n-----END PRIVATE KEY-----"
    )
    task = task_create(
        agent="refund",
        goal=f"Refund order B2002; the customer's card is {CORPUS['card']}",
        input={
            "order_id": "B2002",
            "api_key": CORPUS["openai"],
            "password": CORPUS["password"],
            "note": f"Authorization: Bearer {CORPUS['bearer']} card {CORPUS['card-dashes']}",
            "aws": CORPUS["aws"],
            "deploy": private_key,
        },
        created_by=starter,
    )
    task = run_until_parked_or_done(task)
    gate = open_gate(task)
    gate_reject(
        gate_id=gate.pk,
        actor=operator,
        seen_digest=gate.args_digest,
        feedback=f"refund at most 50; use {CORPUS['github']} and {CORPUS['slack']}",
    )
    task = run_until_parked_or_done(task)
    assert task.status == "succeeded", task.failure
    item = AuditItem.objects.filter(task_id=task.pk).first()
    assert item is not None
    audit_item_review(
        item_id=item.pk,
        actor=auditor,
        verdict=AuditStatus.FLAGGED,
        note=f"customer sent card {CORPUS['card']} by email",
    )

    stored = dump_everything()
    assert "[redacted]" in stored
    assert leaks(stored) == []
    pages: list[Any] = [
        client_for(operator).get(reverse("agentops:task_detail", args=[task.pk])),
        client_for(operator).get(reverse("reviews:decisions")),
        client_for(auditor).get(reverse("reviews:audit")),
    ]
    for page in pages:
        assert page.status_code == 200
        assert leaks(page.content.decode()) == []
