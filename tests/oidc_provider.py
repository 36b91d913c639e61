"""A real OpenID Provider for the single sign-on tests: panva's oidc-provider (tests/oidc,
installed by `make oidc-provider`), run by Node in a process of its own.

`oidc_provider` starts one per pytest worker for the session, on a free port of 127.0.0.1, and
waits for the line it prints once it listens (no fixed sleep); the session's end stops it. Its
people are a JSON file the test rewrites (`people_set`): the provider reads it at every sign-in
and claims request, so a group taken away there is seen at the next sign-in. `oidc_settings`
points the product at it (the settings agentops/oidc_env.py would make from AGENTOPS_OIDC_*, and
the Content-Security-Policy's form-action that lets sign-out go on to it), with the roles of the
product mapped from provider groups.

`sign_in_at_provider` walks a person through the provider's own pages as a browser would (its
cookies kept in an httpx client: the provider's session), up to the redirect back to the product;
the product's side of it (the start and the callback) goes through Django's test client.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from agentops.oidc_env import sign_out_form_action

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc"
CLIENT_ID = "agentops"
CLIENT_SECRET = "test-secret"
PROVIDER_NAME = "Test IdP"
# A bound on the provider's start (Node and the package's import, a 2048-bit key): it ends as soon
# as the provider prints its line, within a second on a quiet machine; sized for a loaded one.
START_TIMEOUT_SECONDS = 120.0
# The product's roles, each from a provider group of that name.
GROUPS_MAP = {
    "agentops-operators": ["operators"],
    "agentops-auditors": ["auditors"],
    "agentops-senior-auditors": ["senior auditors"],
    "agentops-policy-admins": ["policy admins"],
    "agentops-scope-granters": ["scope granters"],
    "agentops-task-starters": ["task starters"],
}
PASSWORD = "provider-pw"


@dataclass
class Provider:
    issuer: str
    kid: str
    people_file: Path
    process: subprocess.Popen[bytes]
    people: dict[str, dict[str, Any]] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return f"{self.issuer}{path}"

    def person_set(
        self, login: str, *, groups: list[str], sub: str | None = None, **claims: Any
    ) -> None:
        """Create or change the person `login` at the provider (password PASSWORD)."""
        person = self.people.get(login) or {"password": PASSWORD, "sub": sub or f"sub-{login}"}
        person["claims"] = {
            "preferred_username": login,
            "email": f"{login}@example.com",
            **claims,
            "groups": groups,
        }
        self.people[login] = person
        temporary = self.people_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.people))
        temporary.replace(self.people_file)


def provider_start(workdir: Path, **env: str) -> Provider:
    """A provider process, once it listens (its JSON line read with a deadline)."""
    people_file = workdir / f"people-{len(list(workdir.iterdir()))}.json"
    people_file.write_text("{}")
    process = subprocess.Popen(
        ["node", str(PROVIDER_DIR / "provider.mjs")],
        cwd=PROVIDER_DIR,
        env={
            **os.environ,
            "OIDC_ACCOUNTS": str(people_file),
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([process.stdout], [], [], max(left, 0))
        chunk = os.read(process.stdout.fileno(), 4096) if ready else b""
        if not chunk:
            process.kill()
            raise RuntimeError(
                f"the OpenID Provider did not start (exit {process.poll()}); "
                "is `make oidc-provider` done and Node.js 20.18+ installed?"
            )
        line += chunk
    started = json.loads(line)
    return Provider(
        issuer=started["issuer"], kid=started["kid"], people_file=people_file, process=process
    )


def provider_stop(provider: Provider) -> None:
    provider.process.terminate()
    try:
        provider.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        provider.process.kill()
        provider.process.wait()


@pytest.fixture(scope="session")
def oidc_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oidc")


@pytest.fixture(scope="session")
def oidc_provider(oidc_workdir: Path) -> Iterator[Provider]:
    provider = provider_start(oidc_workdir)
    yield provider
    provider_stop(provider)


def library_settings(provider: Provider, *, jwks_from: Provider | None = None) -> dict[str, Any]:
    """mozilla-django-oidc's settings for `provider` (its keys from `jwks_from`, when given)."""
    return {
        "OIDC_RP_CLIENT_ID": CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": provider.url("/auth"),
        "OIDC_OP_TOKEN_ENDPOINT": provider.url("/token"),
        "OIDC_OP_USER_ENDPOINT": provider.url("/me"),
        "OIDC_OP_JWKS_ENDPOINT": (jwks_from or provider).url("/jwks"),
        "OIDC_RP_SIGN_ALGO": "RS256",
        "OIDC_RP_SCOPES": "openid profile email groups",
        "OIDC_TOKEN_USE_BASIC_AUTH": True,
        "OIDC_TIMEOUT": 30.0,
        "OIDC_USE_PKCE": True,
        "OIDC_USE_NONCE": True,
        "OIDC_STORE_ID_TOKEN": True,
    }


def product_config(provider: Provider) -> dict[str, Any]:
    return {
        "ISSUER": provider.issuer,
        "END_SESSION_ENDPOINT": provider.url("/session/end"),
        "PROVIDER_NAME": PROVIDER_NAME,
        "USERNAME_CLAIM": "preferred_username",
        "GROUPS_CLAIM": "groups",
        "GROUPS_MAP": GROUPS_MAP,
    }


@pytest.fixture
def oidc_settings(settings: Any, oidc_provider: Provider) -> Any:
    """The product signing in at `oidc_provider`, local passwords still on."""
    for name, value in library_settings(oidc_provider).items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "agentops.oidc.ProviderBackend",
    ]
    settings.AGENTOPS = {**settings.AGENTOPS, "OIDC": product_config(oidc_provider)}
    # What the settings add for sign-out to go on to the provider (agentops/settings.py).
    policy = settings.CONTENT_SECURITY_POLICY
    form_action = policy["DIRECTIVES"]["form-action"]
    settings.CONTENT_SECURITY_POLICY = {
        **policy,
        "DIRECTIVES": {
            **policy["DIRECTIVES"],
            "form-action": [*form_action, *sign_out_form_action(settings.AGENTOPS["OIDC"])],
        },
    }
    return settings


FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


def provider_walk(
    agent: httpx.Client, url: str, *, login: str, password: str = PASSWORD, back_to: str
) -> str:
    """Follow the provider's redirects from `url`, signing in on its page when it asks, up to
    the redirect to `back_to` (a URL prefix of the product), which is returned."""
    for _ in range(10):
        if url.startswith(back_to):
            return url
        response = agent.get(url)
        if response.status_code == 200 and 'name="password"' in response.text:
            action = unescape(FORM_ACTION.search(response.text).group(1))  # type: ignore[union-attr]
            response = agent.post(
                urljoin(url, action), data={"username": login, "password": password}
            )
        assert response.status_code in (302, 303), (response.status_code, response.text[:500])
        url = urljoin(url, response.headers["location"])
    raise AssertionError(f"no way back to {back_to} from the provider")


def provider_sign_out(agent: httpx.Client, url: str) -> str:
    """Confirm the provider's sign-out page at `url`; where it sends the browser after."""
    page = agent.get(url)
    assert page.status_code == 200, page.text[:500]
    action = unescape(FORM_ACTION.search(page.text).group(1))  # type: ignore[union-attr]
    fields = dict(HIDDEN.findall(page.text))
    done = agent.post(urljoin(url, action), data={**fields, "logout": "yes"})
    assert done.status_code in (302, 303), done.text[:500]
    return urljoin(url, done.headers["location"])


def callback_path(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"
