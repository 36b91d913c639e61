"""Database slots under gevent: requests share a fixed set of persistent connections, a request
waits for a free one (then gives up), and a connection store made before gevent patched the
standard library is refused.

gevent's monkey-patching cannot be undone, so each check runs in a child process that patches
first, as gunicorn's gevent worker does, and then sets Django up on the test database.
"""

from __future__ import annotations

import json
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
from agentops.plumbing import slots

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


@pytest.mark.django_db(transaction=True)
def test_threads_share_one_slot_as_each_lends_it_while_it_waits():
    """A worker's tasks on threads (`worker --tasks`): three threads, one slot. Each reads its
    connection's backend, lends the slot back, and waits until all three are waiting together
    (which no thread keeping its slot would allow), then takes a slot back and reads again."""
    import threading

    from django.db import connection

    from agentops.plumbing import slots

    pool = slots.Slots(1, 30.0, green=False)
    all_waiting = threading.Barrier(3, timeout=60)
    backends: list[int] = []

    def task() -> None:
        with pool.hold():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backends.append(cursor.fetchone()[0])
            assert pool.lend()
            all_waiting.wait()
            pool.take_back()
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backends.append(cursor.fetchone()[0])

    threads = [threading.Thread(target=task) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert len(backends) == 6 and len(set(backends)) == 1
    assert pool.lend() is False  # this thread holds none
    with pool.hold():
        connection.close()


def test_a_slot_that_does_not_come_free_after_a_call_stops_the_run_as_a_lost_lease():
    from agentops.engine.errors import LeaseLost
    from agentops.engine.leases import _CallBlock
    from agentops.plumbing import slots

    class Beat:
        lease = type("Lease", (), {"task_id": 7})()
        _armed = True

    pool = slots.Slots(1, 0.1, green=False)
    block = _CallBlock(Beat())  # type: ignore[arg-type]
    pool._free.get()  # another thread holds the only slot

    with pytest.raises(LeaseLost, match="task 7: no database slot came free after a call"):
        block._take_back(pool)


@pytest.mark.django_db
def test_under_gevent_a_body_over_the_limit_answers_400_before_a_slot_json_under_the_api():
    """The slot middleware reads the body before it takes a slot: one over
    DATA_UPLOAD_MAX_MEMORY_SIZE is answered there, in JSON for the API's clients."""
    script = _PATCH_THEN_SETUP + (
        "from django.conf import settings\n"
        "from django.test import RequestFactory\n"
        "from agentops.plumbing import slots\n"
        "def view(request):\n"
        "    raise AssertionError('the view must not run')\n"
        "middleware = slots.DatabaseSlotMiddleware(view)\n"
        "body = b'x' * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)\n"
        "post = RequestFactory().post\n"
        "for path in ('/api/v1/tasks', '/tasks/new'):\n"
        "    answer = middleware(post(path, body, content_type='application/json'))\n"
        "    print(path, answer.status_code, answer['Content-Type'])\n"
        "    print(answer.content.decode().strip())\n"
    )
    words = f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"

    result = _child(script)

    api, api_body, page, page_body = result.stdout.splitlines()[-4:]
    assert api == "/api/v1/tasks 400 application/json", result.stderr
    assert json.loads(api_body)["detail"].startswith(words)
    assert page == "/tasks/new 400 text/plain"
    assert page_body.startswith(words)
