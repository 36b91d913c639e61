"""Database slots under gevent: requests share a fixed set of persistent connections, a request
waits for a free one (then gives up), and a connection store made before gevent patched the
standard library is refused.

gevent's monkey-patching cannot be undone, so each check runs in a child process that patches
first, as gunicorn's gevent worker does, and then sets Django up on the test database.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

from tests.conftest import ROOT, database_url

_PATCH_THEN_SETUP = """
from gevent import monkey; monkey.patch_all()
import django; django.setup()
"""

_SHARE = """
import gevent
from django.db import connection
from agentops import slots

pool = slots.web_slots()
backends = []

def request(pause):
    with slots.database_slot():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid(), pg_sleep(%s)", [pause])
            backends.append(cursor.fetchone()[0])

gevent.joinall([gevent.spawn(request, 0.2) for _ in range(6)], raise_error=True)
print("served", len(backends), "connections", len(set(backends)), "slots", pool.size)

pool.wait_seconds = 0.1
gave_up = []

def impatient():
    try:
        request(0.5)
    except slots.NoSlotFree:
        gave_up.append(1)

gevent.joinall([gevent.spawn(impatient) for _ in range(3)])
print("gave up", len(gave_up))
"""


def _child(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "agentops.settings",
            "DATABASE_URL": database_url(),
            "REDIS_URL": settings.RQ_QUEUES["default"]["URL"],
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db
def test_greenlets_share_the_slots_connections_and_wait_for_a_free_one():
    result = _child(_PATCH_THEN_SETUP + _SHARE, AGENTOPS_WEB_SLOTS="2")

    lines = result.stdout.splitlines()
    assert lines[-2:] == ["served 6 connections 2 slots 2", "gave up 1"], result.stderr


@pytest.mark.django_db
def test_slots_refuse_a_connection_store_made_before_gevent_patched_threading():
    script = (
        "import django.db\n"
        "from gevent import monkey; monkey.patch_all()\n"
        "import django; django.setup()\n"
        "from agentops.plumbing import slots\n"
        "slots.web_slots()\n"
    )

    result = _child(script)

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "before gevent patched" in result.stderr


def test_outside_gevent_there_are_no_slots_to_hold():
    from agentops.plumbing import slots

    assert slots.web_slots() is None
