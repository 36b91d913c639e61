"""Builders the test modules share: a task to run, the engine run as a worker would, and a
signed-in test client.

One module for them, imported by every test module that needs them (the review tests' own
builders, tests/reviews/builders.py, build on these), rather than from one test module another
imports.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.base import VALID_KEY_CHARS
from django.http import HttpRequest
from django.test import Client
from django.utils import timezone
from django.utils.crypto import get_random_string

from agentops.engine import task_create
from agentops.engine.runner import task_advance
from agentops.models import Task
from agentops.states import TaskStatus


def refund(**input_overrides) -> Task:
    return task_create(
        agent="refund", goal="Refund order A1001", input={"order_id": "A1001", **input_overrides}
    )


def run_until_parked_or_done(task: Task, *, max_jobs: int = 20) -> Task:
    """Advance like a worker would, making scheduled retries due at once."""
    for _ in range(max_jobs):
        task.refresh_from_db()
        if task.status == TaskStatus.RETRY_SCHEDULED:
            Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now())
        elif task.status not in {TaskStatus.QUEUED, TaskStatus.RUNNING}:
            return task
        task_advance(task_id=task.pk, owner="test")
    task.refresh_from_db()
    return task


def signed_in(client: Client, user: Any) -> Client:
    """`client` signed in as `user`: the session row `Client.force_login` leaves (the user's id,
    the first backend that gets users, the session hash) and its cookie, written with one INSERT.

    `force_login` also saves two empty sessions first, cycles the session key and updates
    `last_login`: some ten statements a client, and nothing reads `last_login`. Signing in
    itself is tested through the login page (tests/agentops/test_throttle.py, test_web.py)."""
    backend = client._get_backend()
    user.backend = backend
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store._session_key = get_random_string(32, VALID_KEY_CHARS)
    data = {
        SESSION_KEY: user._meta.pk.value_to_string(user),
        BACKEND_SESSION_KEY: backend,
        HASH_SESSION_KEY: user.get_session_auth_hash(),
    }
    store._session_cache = dict(data)  # a new session: nothing to load (which would drop the key)
    store.create_model_instance(data).save(force_insert=True)
    request = HttpRequest()
    request.session = store
    client._set_login_cookies(request)
    return client
