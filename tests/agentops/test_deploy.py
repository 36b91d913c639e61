"""The deployable product: settings that fail closed, health endpoints, error pages, logs and
request ids, and the production web server (gunicorn from the Procfile) under 200 concurrent
requests.

Settings are read once per process, so the production-mode checks run `manage.py` in a child
process with a production environment (no AGENTOPS_DEV) pointed at the test database.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client, RequestFactory
from django.urls import reverse
from rq.job import Job

from agentops import gunicorn_conf
from agentops.models import Event, Task
from agentops.plumbing import dburl, queues
from agentops.plumbing.logs import RefusalFilter, StructuredFormatter, task_context
from agentops.plumbing.request_ids import server_error
from tests.conftest import ROOT, database_url, free_port, wait_for

PRODUCTION_HOST = "agentops.example.com"


def production_env(**overrides: str) -> dict[str, str]:
    """The production environment docs/operations.md documents, on the test database."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTOPS_", "DJANGO_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="agentops.settings",
        DATABASE_URL=database_url(),
        REDIS_URL=settings.RQ_QUEUES["default"]["URL"],
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS=PRODUCTION_HOST,
        DJANGO_CSRF_TRUSTED_ORIGINS=f"https://{PRODUCTION_HOST}",
        DJANGO_SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https",
        DJANGO_SECURE_HSTS_PRELOAD="true",
    )
    env.update(overrides)
    return {key: value for key, value in env.items() if value != ""}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # Only against a command that hangs: `migrate` on a new embedded server took over 120 s
        # at a load average of 20 on two cores.
        timeout=600,
    )


# -- settings that fail closed ------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("variable", ["DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS"])
def test_production_settings_refuse_to_start_without_a_required_variable(variable):
    result = manage("check", env=production_env(**{variable: ""}))

    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert variable in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.django_db
def test_production_settings_refuse_the_development_secret_key():
    result = manage("check", env=production_env(DJANGO_SECRET_KEY="dev-insecure-change-me"))

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


@pytest.mark.django_db
def test_the_deploy_check_passes_with_the_documented_production_environment():
    env = production_env(AGENTOPS_SIM_BASE_URL="https://services.example.com")
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
def test_the_deploy_check_names_each_agent_production_cannot_offer_and_the_setting():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())

    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNINGS:" not in result.stderr and "ERRORS:" not in result.stderr
    named = re.findall(
        r"^\?: \(agentops\.I001\) agent '(\w+)' is not offered: it needs "
        r"AGENTOPS_SIM_BASE_URL \(the base URL of the shipped agents' services: [^)]*\), which "
        r"is not set$",
        result.stderr,
        re.M,
    )
    assert set(named) >= {"refund", "trip", "triage", "goodwill", "procurement", "refund_ask"}
    assert "bench_noop" not in result.stderr


@pytest.mark.django_db
def test_production_mode_is_the_default_and_debug_is_off_there():
    script = "from django.conf import settings as s; print(s.DEBUG, s.DEV, s.SESSION_COOKIE_SECURE)"
    result = manage("shell", "-c", script, env=production_env())

    assert result.stdout.split()[-3:] == ["False", "False", "True"], result.stderr


@pytest.mark.django_db(transaction=True)
def test_seed_demo_refuses_demo_users_outside_development_mode(django_user_model):
    result = manage("seed_demo", env=production_env())

    assert result.returncode != 0
    # A development command: production settings do not install it at all.
    assert "Unknown command: 'seed_demo'" in result.stderr
    assert not django_user_model.objects.filter(username="admin").exists()


# -- health endpoints ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_health_endpoints_answer_without_login_or_an_allowed_host():
    client = Client(HTTP_HOST="10.1.2.3")  # a balancer probes by address

    alive = client.get("/healthz")
    ready = client.get("/readyz")

    assert (alive.status_code, alive.content) == (200, b"ok\n")
    assert (ready.status_code, ready.content) == (200, b"ok\n")
    assert alive["Cache-Control"] == "no-store"
    # A balancer's HEAD probe gets the status and no body.
    probes = [client.head("/healthz"), client.head("/readyz")]
    assert [(probe.status_code, probe.content) for probe in probes] == [(200, b""), (200, b"")]


@pytest.mark.django_db
def test_readyz_answers_503_and_nothing_more_when_redis_is_unreachable():
    probe = (
        "from django.test import Client; r = Client().get('/readyz'); "
        "print(r.status_code, r.content.decode().strip())"
    )
    result = manage(
        "shell",
        "-c",
        probe,
        env={**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": "redis://127.0.0.1:9/0"},
    )

    assert result.stdout.strip().splitlines()[-1] == "503 not ready", result.stderr


def test_readyz_answers_503_within_the_connect_deadline_when_postgresql_never_answers(black_hole):
    probe = (
        "import time; from django.test import Client; began = time.monotonic(); "
        "r = Client().get('/readyz'); "
        "print(r.status_code, r.content.decode().strip(), round(time.monotonic() - began, 1))"
    )
    result = manage(
        "shell",
        "-c",
        probe,
        env={
            **os.environ,
            "DATABASE_URL": f"postgres://agentops@127.0.0.1:{black_hole.port}/agentops",
            "AGENTOPS_DB_CONNECT_TIMEOUT": "2",
        },
    )

    status, answer, took = result.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    assert (status, answer) == ("503 not", "ready"), result.stderr
    assert 2 <= float(took) < 2 + 5  # the connect gave up, not forever
    assert len(black_hole.connections) >= 1


def test_a_database_urls_own_connect_timeout_wins_over_the_default():
    from agentops.settings import database_settings

    default = database_settings("postgres://u@db.example/agentops")
    own = database_settings("postgres://u@db.example/agentops?connect_timeout=11")

    assert default["OPTIONS"]["connect_timeout"] == 5
    assert str(own["OPTIONS"]["connect_timeout"]) == "11"


# -- error pages, favicon, dashboards -----------------------------------------------------------


@pytest.mark.django_db
def test_a_404_uses_the_site_layout_and_leaks_nothing(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user(username="u", password="x"))

    response = client.get("/no/such/page/")
    html = response.content.decode()

    assert response.status_code == 404
    assert "Page not found" in html
    assert 'class="topbar"' in html
    assert "URLconf" not in html and "agentops.urls" not in html


@pytest.mark.django_db
def test_a_403_uses_the_site_layout_with_navigation(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user(username="u", password="x"))

    response = client.get("/policies/")
    html = response.content.decode()

    assert response.status_code == 403
    assert "You are not allowed to do this" in html
    assert "Log out" in html


def test_a_500_uses_the_site_layout_without_a_request_context():
    request = RequestFactory().get("/")
    request.request_id = "req-0123456789"

    response = server_error(request)
    html = response.content.decode()

    assert response.status_code == 500
    assert "Something went wrong" in html
    assert 'class="topbar"' in html
    assert '<code translate="no">req-0123456789</code>' in html


@pytest.mark.django_db
def test_the_favicon_is_served():
    client = Client()

    redirect = client.get("/favicon.ico")
    icon = client.get(redirect["Location"])

    assert redirect.status_code == 301
    assert icon.status_code == 200
    assert b"<svg" in b"".join(icon.streaming_content)


@pytest.mark.django_db
def test_the_rq_dashboard_is_for_staff_only(django_user_model):
    user = django_user_model.objects.create_user(username="o", password="x")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    staff = django_user_model.objects.create_user(username="s", password="x", is_staff=True)
    client = Client()

    client.force_login(user)
    refused = client.get("/admin/rq/")
    client.force_login(staff)
    shown = client.get("/admin/rq/")

    assert refused.status_code == 302 and "/admin/login/" in refused["Location"]
    assert shown.status_code == 200


# -- structured logs ----------------------------------------------------------------------------


def _record(message: str, *, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc else None
    return logging.LogRecord("agentops.x", logging.WARNING, __file__, 1, message, (), exc_info)


def test_log_lines_carry_time_level_logger_and_the_task_context():
    logger = logging.getLogger("agentops.test")
    handler = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    records: list[str] = []
    capture = logging.Handler()
    capture.filters = handler.filters
    capture.emit = lambda record: records.append(StructuredFormatter("kv").format(record))
    logger.addHandler(capture)
    try:
        with task_context(task_id=42, step=3):
            logger.warning("tool said %s", "no thanks")
    finally:
        logger.removeHandler(capture)

    (line,) = records
    fields = dict(part.split("=", 1) for part in shlex.split(line))
    assert fields["level"] == "WARNING"
    assert fields["logger"] == "agentops.test"
    assert fields["task_id"] == "42" and fields["step"] == "3"
    assert fields["msg"] == "tool said no thanks"
    assert fields["time"].endswith("+00:00")


def test_json_log_lines_are_one_object_each():
    line = StructuredFormatter("json").format(_record('a "quoted"\nmessage'))

    parsed = json.loads(line)
    assert "\n" not in line
    assert parsed["msg"] == 'a "quoted"\nmessage'
    assert set(parsed) >= {"time", "level", "logger", "msg"}


def test_an_expected_refusal_is_logged_as_one_line_without_its_traceback():
    try:
        raise PermissionDenied("not an operator")
    except PermissionDenied as refusal:
        record = _record("Forbidden (Permission denied): /review/", exc=refusal)
    try:
        raise ValueError("boom")
    except ValueError as error:
        crash = _record("Internal Server Error: /", exc=error)

    RefusalFilter().filter(record)
    RefusalFilter().filter(crash)

    assert len(StructuredFormatter("kv").format(record).splitlines()) == 1
    assert "Traceback" in StructuredFormatter("kv").format(crash)


# -- request ids and 5xx lines --------------------------------------------------------------------

_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def kv_fields(line: str) -> dict[str, str]:
    """The fields of one kv log line (quoted values unquoted)."""
    return {
        key: json.loads(value) if value.startswith('"') else value
        for key, value in _KV.findall(line)
    }


@contextmanager
def console_lines(*names: str) -> Iterator[list[str]]:
    """The kv lines the console handler would write for records of the named loggers."""
    console = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    lines: list[str] = []
    capture = logging.Handler()
    capture.filters = console.filters
    capture.emit = lambda record: lines.append(StructuredFormatter("kv").format(record))
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.addHandler(capture)
    try:
        yield lines
    finally:
        for logger in loggers:
            logger.removeHandler(capture)


def _without_collected_static(settings: Any, root: Path) -> None:
    """The finding: production's hashed static names, but collectstatic never ran."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"},
    }
    settings.STATIC_ROOT = root


@pytest.mark.django_db
def test_a_500_writes_one_error_line_with_traceback_method_path_user_and_request_id(
    django_user_model, settings, tmp_path
):
    _without_collected_static(settings, tmp_path / "static")
    client = Client(raise_request_exception=False)
    client.force_login(django_user_model.objects.create_user(username="olga", password="x"))

    with console_lines("django.request", "agentops") as lines:
        response = client.get("/login/")

    request_id = response["X-Request-ID"]
    errors = [kv_fields(line) for line in lines if kv_fields(line)["level"] == "ERROR"]
    assert response.status_code == 500
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert f'<code translate="no">{request_id}</code>' in response.content.decode()
    (error,) = errors
    assert error["logger"] == "django.request"
    assert (error["method"], error["path"], error["user"]) == ("GET", "/login/", "olga")
    assert error["request_id"] == request_id
    assert error["exc"].startswith("Traceback (most recent call last):")
    assert "Missing staticfiles manifest entry" in error["exc"]


def test_the_500_page_renders_and_the_error_is_logged_when_the_database_is_down():
    script = (
        "from django.test import Client; "
        "r = Client(raise_request_exception=False).post('/login/', "
        "{'username': 'olga', 'password': 'x'}, HTTP_HOST='localhost', "
        "HTTP_X_REQUEST_ID='proxy-id.0042'); "
        "print('status', r.status_code, r['X-Request-ID']); print(r.content.decode())"
    )
    down = dburl.database_url({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": 9})

    result = manage(
        "shell", "-c", script, env={**os.environ, "DATABASE_URL": down, "DJANGO_DEBUG": "0"}
    )

    assert "status 500 proxy-id.0042" in result.stdout, result.stderr
    assert '<code translate="no">proxy-id.0042</code>' in result.stdout
    assert 'class="topbar"' in result.stdout  # the site layout needs no database
    (error,) = [kv_fields(line) for line in result.stderr.splitlines() if "level=ERROR" in line]
    assert error["logger"] == "django.request"
    assert (error["method"], error["path"], error["user"]) == ("POST", "/login/", "anonymous")
    assert error["request_id"] == "proxy-id.0042"
    assert "OperationalError" in error["exc"]


@pytest.mark.parametrize(
    ("incoming", "kept"),
    [
        ("6f1c2b7e-9a8d-4c3b-8e2f-0a1b2c3d4e5f", True),
        ("lb.7f3a_09", True),
        ("short", False),
        ("x" * 129, False),
        ('id" level=ERROR', False),
        ("id\nsecond-line", False),
    ],
)
def test_a_sane_incoming_request_id_is_kept_and_any_other_is_replaced(incoming, kept):
    response = Client(HTTP_HOST="10.1.2.3").get("/healthz", HTTP_X_REQUEST_ID=incoming)

    returned = response["X-Request-ID"]
    assert (returned == incoming) is kept
    if not kept:
        assert re.fullmatch(r"[0-9a-f]{32}", returned)


@pytest.mark.django_db(transaction=True)
def test_a_job_a_request_enqueued_carries_its_request_id_into_the_worker_log(
    processes, django_user_model
):
    starter = django_user_model.objects.create_user(username="sam", password="x")
    starter.groups.add(Group.objects.get_or_create(name="task starters")[0])
    client = Client()
    client.force_login(starter)

    response = client.post(
        reverse("agentops:task_new"),
        {"agent": "refund", "goal": "Refund order A1001", "input": '{"order_id": "A1001"}'},
        HTTP_X_REQUEST_ID="req-start-0001",
    )
    task = Task.objects.get()
    queue = queues.queue()
    (job_id,) = queue.job_ids
    job = Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer)
    worker = processes.worker(burst=True)
    processes.finished(worker, timeout=120)
    log = processes.log(worker)

    assert response.status_code == 302
    assert job.args == [task.pk]  # the job's arguments are still ids only
    assert job.meta == {"request_id": "req-start-0001"}
    done = [
        kv_fields(line)
        for line in log.splitlines()
        if line.startswith("time=") and "logger=agentops.jobs" in line
    ]
    assert done, log
    assert {line["request_id"] for line in done} == {"req-start-0001"}
    assert {line["task_id"] for line in done} == {str(task.pk)}
    # The worker names itself as its claims do: host, pid and a token of its own.
    assert re.search(rf'msg="worker {socket.gethostname()}:{worker.pid}:[0-9a-f]{{8}} takes', log)
    assert re.fullmatch(
        rf"{socket.gethostname()}:{worker.pid}:[0-9a-f]{{8}}:{job_id}",
        Event.objects.get(task=task, action="agentops.task.claimed").payload["owner"],
    )


# -- the embedded PostgreSQL server -------------------------------------------------------------


@pytest.fixture
def short_tmp_path() -> Iterator[Path]:
    """A temporary directory with a short path: a Unix socket's path has at most 107 bytes, and
    under xdist pytest's `tmp_path` is long enough that the embedded PostgreSQL would put its
    socket elsewhere."""
    path = Path(tempfile.mkdtemp(prefix="agentops-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_without_database_url_the_settings_start_an_embedded_postgresql(short_tmp_path):
    tmp_path = short_tmp_path
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(AGENTOPS_DEV="1", AGENTOPS_DATA_DIR=str(tmp_path / "data"))
    try:
        migrated = manage("migrate", "--no-input", "-v", "0", env=env)
        assert migrated.returncode == 0, migrated.stderr
        script = (
            "from django.db import connection as c; cur = c.cursor(); "
            'cur.execute("SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal"); '
            "print(c.vendor, c.settings_dict['HOST'], cur.fetchone()[0])"
        )
        shown = manage("shell", "-c", script, env=env)
        vendor, host, triggers = shown.stdout.split()[-3:]
        assert vendor == "postgresql"
        assert host.startswith(str(tmp_path))  # a socket of the embedded server, no TCP
        assert int(triggers) >= 3  # ledger, decision log and policy triggers exist here too
        status = manage("embedded", "status", env=env)
        assert "postgres: running" in status.stdout and "redis: running" in status.stdout
    finally:
        stopped = manage("embedded", "stop", env=env)
    assert "postgres: stopped" in stopped.stdout, stopped.stderr
    assert "redis: stopped" in stopped.stdout, stopped.stderr
    # Asking does not start them again.
    status = manage("embedded", "status", env=env)
    assert "postgres: stopped" in status.stdout and "redis: stopped" in status.stdout


# -- the production web server under load -------------------------------------------------------

WEB_PROCESSES, WEB_SLOTS = 2, 4
CONCURRENT_REQUESTS = 200
TRICKLING_CLIENTS = 50


def _procfile_command(name: str) -> list[str]:
    for line in (ROOT / "Procfile").read_text().splitlines():
        process, _, command = line.partition(":")
        if process.strip() == name:
            return shlex.split(command)
    raise AssertionError(f"no {name} process in the Procfile")


def _session_cookie(user: Any) -> str:
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[SESSION_KEY] = str(user.pk)
    # The backend that loads users (the role backend only answers permission questions).
    store[BACKEND_SESSION_KEY] = "reviews.roles.PermissionRowsBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save()
    return store.session_key


class ConnectionWatch(threading.Thread):
    """Samples pg_stat_activity for the web processes' connections until stopped."""

    def __init__(self, database: str) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(database_url(), autocommit=True) as conn:
            while not self.stop.is_set():
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = %s AND application_name = 'agentops:gunicorn'",
                    [self.database],
                ).fetchone()
                self.peak = max(self.peak, count)
                time.sleep(0.02)


@contextmanager
def web_server(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """The Procfile's web process with `env`, its output in `log_path`; yields its base URL
    once /healthz answers, and stops it (SIGTERM) afterwards."""
    command = _procfile_command("web")
    log = open(log_path, "wb")  # noqa: SIM115
    web = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://{env['GUNICORN_BIND']}"
    try:
        wait_serving(web, f"{base}/healthz", log_path)
        yield base
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(timeout=30)
        log.close()


# Only a bound on a start that hangs: a loaded machine may take minutes to import a worker's
# Django; a server that ended fails the wait at once, with its log.
START_SECONDS = 300


def wait_serving(web: subprocess.Popen[bytes], health: str, log_path: Path) -> None:
    """Wait until the web server `web` answers at `health`; fail as soon as it ends."""

    def answering() -> bool:
        if web.poll() is not None:
            raise AssertionError(
                f"the web server ended (exit {web.returncode}): {log_path.read_text()[-4000:]}"
            )
        return _answers(health)

    wait_for(answering, timeout=START_SECONDS, message="the web server to answer")


def _signed_in_operator(django_user_model: Any, settings: Any, *, starter: bool = False) -> str:
    """A session cookie of an operator (who may start tasks, with `starter`), signed with a key
    the web process is given too."""
    operator = django_user_model.objects.create_user(username="olga", password="x")
    operator.groups.add(Group.objects.get_or_create(name="operators")[0])
    if starter:
        operator.groups.add(Group.objects.get_or_create(name="task starters")[0])
    settings.SECRET_KEY = secrets.token_urlsafe(50)  # the web server's key signs the session
    return _session_cookie(operator)


@pytest.mark.django_db(transaction=True)
def test_the_production_web_server_logs_a_500_with_its_request_id_and_shows_it(
    tmp_path, django_user_model, settings
):
    cookie = _signed_in_operator(django_user_model, settings)
    env = production_env(
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        AGENTOPS_STATIC_ROOT=str(tmp_path / "static"),  # collectstatic never ran: the finding
        GUNICORN_BIND=f"127.0.0.1:{free_port()}",
    )
    headers = {
        "Host": PRODUCTION_HOST,
        "X-Forwarded-Proto": "https",
        "Cookie": f"sessionid={cookie}",
    }
    with web_server(env, tmp_path / "web.log") as base:
        page = httpx.get(f"{base}/login/", headers=headers, timeout=30)
        proxied = httpx.get(
            f"{base}/login/", headers={**headers, "X-Request-ID": "edge-5f2a91c0"}, timeout=30
        )
    lines = [kv_fields(line) for line in (tmp_path / "web.log").read_text().splitlines()]
    request_id = page.headers["X-Request-ID"]

    assert (page.status_code, proxied.status_code) == (500, 500)
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert proxied.headers["X-Request-ID"] == "edge-5f2a91c0"
    for response, rid in ((page, request_id), (proxied, "edge-5f2a91c0")):
        assert f'<code translate="no">{rid}</code>' in response.text
        (error,) = [f for f in lines if f.get("level") == "ERROR" and f.get("request_id") == rid]
        assert error["logger"] == "django.request"
        assert (error["method"], error["path"], error["user"]) == ("GET", "/login/", "olga")
        assert error["exc"].startswith("Traceback (most recent call last):")
        assert "Missing staticfiles manifest entry" in error["exc"]
        (access,) = [
            kv_fields(f["msg"])
            for f in lines
            if f.get("logger") == "gunicorn.access" and f"request_id={rid}" in f["msg"]
        ]
        assert (access["method"], access["path"], access["status"]) == ("GET", "/login/", "500")
    assert sum(f.get("level") == "ERROR" for f in lines) == 2  # one line per 500, no echo


@pytest.mark.django_db(transaction=True)
def test_the_production_web_server_answers_200_concurrent_requests_with_bounded_connections(
    tmp_path, django_user_model, settings
):
    cookie = _signed_in_operator(django_user_model, settings)
    env = production_env(
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        DJANGO_ALLOWED_HOSTS=f"{PRODUCTION_HOST},127.0.0.1",
        AGENTOPS_STATIC_ROOT=str(tmp_path / "static"),
        GUNICORN_BIND=f"127.0.0.1:{free_port()}",
        WEB_CONCURRENCY=str(WEB_PROCESSES),
        AGENTOPS_WEB_SLOTS=str(WEB_SLOTS),
        GUNICORN_ACCESS_LOG="0",
    )
    collected = manage("collectstatic", "--no-input", "-v", "0", env=env)
    assert collected.returncode == 0, collected.stderr
    headers = {"Host": PRODUCTION_HOST, "X-Forwarded-Proto": "https"}
    watch = ConnectionWatch(connection.settings_dict["NAME"])
    try:
        with web_server(env, tmp_path / "web.log") as base:
            watch.start()
            paths = ["/healthz", "/", "/review/", "/review/audit", "/review/decisions"]
            signed_in = {**headers, "Cookie": f"sessionid={cookie}"}
            # Each request on a connection of its own: a connection kept idle past gunicorn's
            # keep-alive (5 s; the last request below can come that late on a loaded machine)
            # may be closed by the server just as the client reuses it.
            no_reuse = httpx.Limits(max_connections=200, max_keepalive_connections=0)
            with httpx.Client(timeout=60, limits=no_reuse) as client:

                def fetch(number: int) -> int:
                    path = paths[number % len(paths)]
                    response = client.get(
                        f"{base}{path}", headers=headers if path == "/healthz" else signed_in
                    )
                    return response.status_code

                with ThreadPoolExecutor(max_workers=CONCURRENT_REQUESTS) as pool:
                    began = time.monotonic()
                    statuses = Counter(pool.map(fetch, range(CONCURRENT_REQUESTS)))
                    elapsed = time.monotonic() - began
                static = client.get(f"{base}/favicon.ico", headers=headers, follow_redirects=True)
    finally:
        watch.stop.set()
    watch.join()
    print(
        f"\n{CONCURRENT_REQUESTS} concurrent requests in {elapsed:.2f} s: {dict(statuses)}; "
        f"peak web connections {watch.peak} (ceiling {WEB_PROCESSES * WEB_SLOTS})"
    )

    assert statuses == {200: CONCURRENT_REQUESTS}, (tmp_path / "web.log").read_text()[-3000:]
    assert 0 < watch.peak <= WEB_PROCESSES * WEB_SLOTS
    assert static.status_code == 200 and static.headers["content-type"] == "image/svg+xml"
    assert "immutable" in static.headers.get("cache-control", "")  # hashed, from WhiteNoise


SLOW_HEADERS = f"GET /healthz HTTP/1.1\r\nHost: {PRODUCTION_HOST}\r\nX-Slow: ".encode()
# A form post whose headers arrive at once and whose (large) body then trickles. Its origin and
# CSRF cookie pass the CSRF check's first steps, so the check goes on to read the body's token.
SLOW_BODY_HEAD = (
    f"POST /login/ HTTP/1.1\r\nHost: {PRODUCTION_HOST}\r\nX-Forwarded-Proto: https\r\n"
    f"Origin: https://{PRODUCTION_HOST}\r\nCookie: csrftoken={'c' * 32}\r\n"
    "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\n"
).encode()


class Trickle(threading.Thread):
    """`count` clients, each sending `head` at once and then one more byte every `interval`
    seconds, never finishing (a slow link, or slowloris): with no `head`, the request headers
    trickle; with `SLOW_BODY_HEAD`, the body does. A client the server cuts off connects again
    at once, so `count` are trickling all the time. Bounded: it stops when told, or after
    `limit` seconds."""

    def __init__(
        self,
        address: tuple[str, int],
        count: int,
        *,
        head: bytes = b"",
        interval: float = 2.0,
    ) -> None:
        super().__init__(daemon=True)
        self.address, self.count, self.interval = address, count, interval
        self.limit = 120.0
        self.stop = threading.Event()
        self.started = threading.Event()
        self.cut_off = 0  # clients the server disconnected (and that connected again)
        self.head = head
        self.drip = b"a" * 100_000 if head else SLOW_HEADERS

    def _connect(self) -> list[Any]:
        client = socket.create_connection(self.address, timeout=5)
        client.sendall(self.head + self.drip[:1])
        return [client, 1]

    def run(self) -> None:
        clients = [self._connect() for _ in range(self.count)]
        began = time.monotonic()
        try:
            while not self.stop.is_set() and time.monotonic() - began < self.limit:
                self.started.set()
                self.stop.wait(self.interval)
                for entry in clients:
                    client, sent = entry
                    try:
                        client.sendall(self.drip[sent : sent + 1] or b"a")
                        entry[1] = sent + 1
                    except OSError:
                        client.close()
                        self.cut_off += 1
                        if self.stop.is_set():
                            return
                        entry[:] = self._connect()
        finally:
            for client, _ in clients:
                client.close()


@pytest.mark.django_db(transaction=True)
def test_the_production_web_server_answers_while_50_clients_trickle_headers_and_16_bodies(
    tmp_path, django_user_model, settings, redis_clean
):
    cookie = _signed_in_operator(django_user_model, settings, starter=True)
    port = free_port()
    env = production_env(
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        AGENTOPS_STATIC_ROOT=str(tmp_path / "static"),
        GUNICORN_BIND=f"127.0.0.1:{port}",
        WEB_CONCURRENCY=str(WEB_PROCESSES),
        AGENTOPS_WEB_SLOTS=str(WEB_SLOTS),
        GUNICORN_ACCESS_LOG="0",
        # The refund's services (it is started, not run): production offers it only with them.
        AGENTOPS_SIM_BASE_URL="https://services.example.com",
    )
    collected = manage("collectstatic", "--no-input", "-v", "0", env=env)
    assert collected.returncode == 0, collected.stderr
    headers = {"Host": PRODUCTION_HOST, "X-Forwarded-Proto": "https"}
    signed_in = {**headers, "Cookie": f"sessionid={cookie}"}
    trickle = Trickle(("127.0.0.1", port), TRICKLING_CLIENTS)
    # More slow bodies than database slots: each would hold a slot if the body were read there.
    slow_bodies = Trickle(("127.0.0.1", port), 2 * WEB_PROCESSES * WEB_SLOTS, head=SLOW_BODY_HEAD)
    watch = ConnectionWatch(connection.settings_dict["NAME"])
    latencies: list[float] = []
    try:
        with web_server(env, tmp_path / "web.log") as base:
            watch.start()
            trickle.start()
            slow_bodies.start()
            assert trickle.started.wait(30) and slow_bodies.started.wait(30)
            began_trickling = time.monotonic()
            time.sleep(2 * trickle.interval)  # every client has sent three bytes
            for _ in range(5):
                began = time.monotonic()
                health = httpx.get(f"{base}/healthz", headers=headers, timeout=10)
                latencies.append(time.monotonic() - began)
                assert health.status_code == 200
            login = httpx.get(f"{base}/login/", headers=headers, timeout=10)
            with ThreadPoolExecutor(max_workers=20) as pool:
                pages = Counter(
                    pool.map(
                        lambda path: (
                            httpx.get(f"{base}{path}", headers=signed_in, timeout=30).status_code
                        ),
                        ["/", "/review/", "/review/decisions", "/review/audit"] * 5,
                    )
                )
            form = httpx.get(f"{base}{reverse('agentops:task_new')}", headers=signed_in)
            csrf_cookie = re.search(r"csrftoken=([^;]+)", form.headers["set-cookie"])[1]
            started = httpx.post(
                f"{base}{reverse('agentops:task_new')}",
                headers={
                    **signed_in,
                    "Cookie": f"sessionid={cookie}; csrftoken={csrf_cookie}",
                    "Origin": f"https://{PRODUCTION_HOST}",
                    "X-Request-ID": "slow-clients-start-1",
                },
                data={
                    "csrfmiddlewaretoken": re.search(
                        r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text
                    )[1],
                    "agent": "refund",
                    "goal": "Refund order A1001",
                    "input": '{"order_id": "A1001"}',
                },
                timeout=30,
            )
            time.sleep(max(0.0, 6 * trickle.interval - (time.monotonic() - began_trickling)))
            cut_off = trickle.cut_off
            for tricklers in (trickle, slow_bodies):
                tricklers.stop.set()
                tricklers.join()
    finally:
        trickle.stop.set()
        slow_bodies.stop.set()
        watch.stop.set()
    trickle.join()
    slow_bodies.join()
    watch.join()
    print(
        f"\n/healthz with {TRICKLING_CLIENTS} clients trickling headers and "
        f"{slow_bodies.count} bodies: "
        + ", ".join(f"{latency * 1000:.0f} ms" for latency in latencies)
        + f"; peak web connections {watch.peak} (ceiling {WEB_PROCESSES * WEB_SLOTS}); "
        f"trickling clients cut off {cut_off} times"
    )

    # A server that gave each trickling client a worker until it is cut off (after `keepalive`,
    # 5 s) would keep a health check waiting that long; figures on a quiet machine are printed
    # above (tens of milliseconds), a loaded one is slower but nowhere near the cut-off.
    assert statistics.median(latencies) < gunicorn_conf.keepalive, latencies
    # A client has `keepalive` to send its request line and headers, then it is cut off.
    assert cut_off >= TRICKLING_CLIENTS
    assert login.status_code == 200 and "csrfmiddlewaretoken" in login.text
    assert pages == {200: 20}
    assert 0 < watch.peak <= WEB_PROCESSES * WEB_SLOTS
    # A form post through the gevent worker: its job went to Redis with the request id.
    task = Task.objects.get()
    queue = queues.queue()
    (job_id,) = queue.job_ids
    job = Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer)
    assert started.status_code == 302, started.text[-2000:]
    assert (job.args, job.meta) == ([task.pk], {"request_id": "slow-clients-start-1"})


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False
