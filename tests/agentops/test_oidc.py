"""Single sign-on against a real OpenID Provider (tests/oidc_provider.py: panva's oidc-provider in
a Node process), over real HTTP: the authorization code flow with PKCE, the ID token checked,
people created and updated by their `sub`, roles from the provider's groups, refusals, the
throttle of failed callbacks, local passwords turned off, and sign-out at both ends.

The product's side runs in Django's test client as 127.0.0.1 (the provider's client takes any
port of a loopback redirect URI); the browser's side at the provider is an httpx client with
its cookies.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import SESSION_KEY, authenticate, get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import SuspiciousOperation
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agentops.models import ProviderIdentity
from agentops.oidc import ProviderBackend, authorized_party_holds
from agentops.plumbing import throttle
from tests.agentops.test_deploy import manage, production_env
from tests.oidc_provider import (
    PROVIDER_NAME,
    Provider,
    callback_path,
    library_settings,
    provider_sign_out,
    provider_start,
    provider_stop,
    provider_walk,
)

pytestmark = pytest.mark.django_db

BACK = "http://127.0.0.1/oidc/callback/"


@pytest.fixture
def client() -> Client:
    """The product as the provider's client knows it: at a loopback address."""
    return Client(SERVER_NAME="127.0.0.1")


@pytest.fixture
def agent() -> Iterator[httpx.Client]:
    """The person's browser at the provider (its session cookies)."""
    with httpx.Client(timeout=60) as browser:
        yield browser


@pytest.fixture(autouse=True)
def throttle_cleared() -> Iterator[None]:
    """Failed callbacks count in Redis, outside the test's transaction."""
    yield
    throttle.throttle_forget_all()


def sign_in(client: Client, agent: httpx.Client, login: str, **walk: Any) -> Any:
    """A sign-in from the product's button to its callback; the callback's response."""
    start = client.get(reverse("oidc_authentication_init"))
    assert start.status_code == 302
    back = provider_walk(agent, start["Location"], login=login, back_to=BACK, **walk)
    return client.get(callback_path(back))


def signed_in_as(client: Client) -> Any:
    user_id = client.session.get(SESSION_KEY)
    return get_user_model().objects.get(pk=user_id) if user_id else None


def group_names(user: Any) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def test_the_first_sign_in_creates_the_user_with_the_roles_of_their_provider_groups(
    oidc_settings, oidc_provider, client, agent
):
    oidc_provider.person_set(
        "ada",
        groups=["agentops-operators", "agentops-task-starters", "chess-club"],
        given_name="Ada",
        family_name="Lovelace",
    )

    start = client.get(reverse("oidc_authentication_init"))
    asked = parse_qs(urlsplit(start["Location"]).query)
    assert asked["code_challenge_method"] == ["S256"]
    assert len(asked["code_challenge"][0]) >= 43
    assert asked["nonce"] and asked["state"]
    back = provider_walk(agent, start["Location"], login="ada", back_to=BACK)
    response = client.get(callback_path(back))

    assert response.status_code == 302
    assert response["Location"] == reverse("agentops:task_list")
    user = signed_in_as(client)
    assert (user.username, user.email, user.first_name, user.last_name) == (
        "ada",
        "ada@example.com",
        "Ada",
        "Lovelace",
    )
    assert not user.has_usable_password()
    assert group_names(user) == {"operators", "task starters"}
    identity = ProviderIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (oidc_provider.issuer, "sub-ada")
    assert client.get(reverse("agentops:task_new")).status_code == 200


def test_the_next_sign_in_updates_the_user_and_a_group_taken_away_at_the_provider_is_lost(
    oidc_settings, oidc_provider, client, agent
):
    approvers = Group.objects.create(name="refund approvers")
    oidc_provider.person_set("bob", groups=["agentops-operators", "agentops-auditors"])
    sign_in(client, agent, "bob")
    bob = signed_in_as(client)
    bob.groups.add(approvers)  # given here, by an operator: not the provider's to take
    assert bob.has_perm("reviews.review_audit")

    oidc_provider.person_set(
        "bob", groups=["agentops-operators"], preferred_username="robert", email="rob@example.com"
    )
    client.post(reverse("logout"))
    with httpx.Client(timeout=60) as fresh_browser:
        sign_in(client, fresh_browser, "bob")

    again = signed_in_as(client)
    assert again.pk == bob.pk
    assert (again.username, again.email) == ("robert", "rob@example.com")
    assert group_names(again) == {"operators", "refund approvers"}
    assert ProviderIdentity.objects.filter(user=again).count() == 1
    assert not again.has_perm("reviews.review_audit")


def test_people_are_matched_by_their_subject_not_their_username_or_email(
    oidc_settings, oidc_provider, client, agent, django_user_model
):
    local = django_user_model.objects.create_user(
        username="carol", email="carol@example.com", password="local-pw"
    )
    oidc_provider.person_set("carol", groups=[], sub="sub-carol-at-provider")

    sign_in(client, agent, "carol")

    user = signed_in_as(client)
    assert user.pk != local.pk
    assert user.username == "carol-2"
    local.refresh_from_db()
    assert (local.username, local.provider_identities.count()) == ("carol", 0)


def test_a_username_held_in_another_case_is_not_given_again(
    oidc_settings, oidc_provider, client, agent, django_user_model
):
    """The pages and the record show usernames: a `Root` beside the local `root` would pass for
    them."""
    django_user_model.objects.create_user(username="root", password="local-pw")
    oidc_provider.person_set("rootless", groups=[], preferred_username="Root")

    sign_in(client, agent, "rootless")

    assert signed_in_as(client).username == "Root-2"


def test_a_deactivated_user_is_refused(oidc_settings, oidc_provider, client, agent):
    oidc_provider.person_set("dave", groups=["agentops-operators"])
    sign_in(client, agent, "dave")
    dave = signed_in_as(client)
    dave.is_active = False
    dave.save()
    assert client.get(reverse("agentops:task_list")).status_code == 302  # signed out at once

    with httpx.Client(timeout=60) as fresh_browser:
        response = sign_in(client, fresh_browser, "dave")

    assert response.status_code == 403
    assert "deactivated" in response.content.decode()
    assert client.get(reverse("agentops:task_list")).status_code == 302
    assert group_names(dave) == {"operators"}  # nothing changed


def test_a_state_this_session_was_not_given_is_refused(oidc_settings, oidc_provider, agent):
    oidc_provider.person_set("erin", groups=["agentops-operators"])
    own, other = Client(SERVER_NAME="127.0.0.1"), Client(SERVER_NAME="127.0.0.1")
    start = other.get(reverse("oidc_authentication_init"))
    back = provider_walk(agent, start["Location"], login="erin", back_to=BACK)

    own.get(reverse("oidc_authentication_init"))  # a sign-in of its own under way
    response = own.get(callback_path(back))  # with the state and code of another session

    assert response.status_code == 403
    assert signed_in_as(own) is None
    assert not get_user_model().objects.filter(username="erin").exists()


def test_an_id_token_with_another_nonce_is_refused(oidc_settings, oidc_provider, client, agent):
    oidc_provider.person_set("fay", groups=["agentops-operators"])
    start = client.get(reverse("oidc_authentication_init"))
    parts = urlsplit(start["Location"])
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    swapped = urlunsplit(parts._replace(query=urlencode({**query, "nonce": "not-the-one"})))

    response = client.get(callback_path(provider_walk(agent, swapped, login="fay", back_to=BACK)))

    assert response.status_code == 403
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username="fay").exists()


@pytest.fixture(scope="module")
def impostor(oidc_provider: Provider, oidc_workdir: Any) -> Iterator[Provider]:
    """A second provider posing as the first: its key id, another key."""
    provider = provider_start(oidc_workdir, OIDC_KID=oidc_provider.kid)
    yield provider
    provider_stop(provider)


def test_an_id_token_signed_with_another_key_is_refused(
    oidc_settings, oidc_provider, impostor, client, agent, caplog
):
    """The impostor's ID token names the real provider's key id, so the signature check (which
    comes before the issuer's) is what refuses it."""
    for name, value in library_settings(impostor, jwks_from=oidc_provider).items():
        setattr(oidc_settings, name, value)
    impostor.person_set("gil", groups=["agentops-operators"])

    with caplog.at_level("WARNING", logger="agentops.login"):
        response = sign_in(client, agent, "gil")

    assert response.status_code == 403
    assert "InvalidSignatureError" in caplog.text
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username="gil").exists()


def code_guessed(client: Client) -> Any:
    """A callback with a state this session was given (a sign-in under way) and a guessed code,
    which the provider's token endpoint refuses."""
    start = client.get(reverse("oidc_authentication_init"))
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    return client.get(f"{reverse('oidc_authentication_callback')}?code=guess&state={state}")


def test_failed_callbacks_are_throttled_per_client_address(
    oidc_settings, oidc_provider, client, agent
):
    oidc_settings.AGENTOPS = {**oidc_settings.AGENTOPS, "LOGIN_ADDRESS_ATTEMPTS": 3}
    oidc_provider.person_set("hal", groups=["agentops-operators"])

    statuses = [code_guessed(client).status_code for _ in range(3)]
    locked_out = sign_in(client, agent, "hal")
    elsewhere = Client(SERVER_NAME="127.0.0.1", REMOTE_ADDR="192.0.2.7")
    with httpx.Client(timeout=60) as other_browser:
        from_elsewhere = sign_in(elsewhere, other_browser, "hal")

    assert statuses == [403, 403, 429]
    assert locked_out.status_code == 429
    assert int(locked_out["Retry-After"]) > 0
    assert signed_in_as(client) is None
    assert from_elsewhere.status_code == 302
    assert signed_in_as(elsewhere).username == "hal"


def test_callbacks_of_sign_ins_never_started_here_are_refused_and_not_counted(
    oidc_settings, oidc_provider, client, agent
):
    """Any web page can make a browser ask for the callback (an image, no cookies sent): such
    requests must not lock the address (an office behind one) out of signing in, nor sign out
    whoever is signed in."""
    oidc_settings.AGENTOPS = {**oidc_settings.AGENTOPS, "LOGIN_ADDRESS_ATTEMPTS": 3}
    oidc_provider.person_set("hope", groups=["agentops-operators"])
    sign_in(client, agent, "hope")
    callback = reverse("oidc_authentication_callback")
    cookieless = Client(SERVER_NAME="127.0.0.1")

    statuses = [cookieless.get(f"{callback}?code=x&state=y").status_code for _ in range(5)]
    from_another_site = client.get(f"{callback}?error=access_denied&state=y")
    with httpx.Client(timeout=60) as other_browser:
        then = sign_in(Client(SERVER_NAME="127.0.0.1"), other_browser, "hope")

    assert statuses == [403] * 5
    assert from_another_site.status_code == 403
    assert signed_in_as(client).username == "hope"
    assert then.status_code == 302


def test_a_password_posted_with_a_code_in_the_url_is_only_a_password(
    oidc_settings, oidc_provider, client, agent, django_user_model
):
    """Django asks every backend; the provider's must not take a code from the password form's
    URL (it would exchange it without this session's PKCE verifier and nonce)."""
    django_user_model.objects.create_user(username="ned", password="local-pw")
    oidc_provider.person_set("ned-at-provider", groups=["agentops-operators"])
    start = Client(SERVER_NAME="127.0.0.1").get(reverse("oidc_authentication_init"))
    back = urlsplit(provider_walk(agent, start["Location"], login="ned-at-provider", back_to=BACK))

    wrong = client.post(f"{reverse('login')}?{back.query}", {"username": "ned", "password": "x"})
    right = client.post(
        f"{reverse('login')}?{back.query}", {"username": "ned", "password": "local-pw"}
    )

    assert wrong.status_code == 200  # the form's error, not the token endpoint's
    assert right.status_code == 302
    assert signed_in_as(client).username == "ned"
    assert not ProviderIdentity.objects.exists()


def test_signing_in_cycles_the_session_key(oidc_settings, oidc_provider, client, agent):
    oidc_provider.person_set("ivy", groups=[])
    start = client.get(reverse("oidc_authentication_init"))
    before = client.session.session_key
    back = provider_walk(agent, start["Location"], login="ivy", back_to=BACK)

    client.get(callback_path(back))

    assert before and client.session.session_key != before
    assert signed_in_as(client).username == "ivy"


def test_sign_out_ends_the_session_here_and_at_the_provider(
    oidc_settings, oidc_provider, client, agent
):
    oidc_provider.person_set("jan", groups=["agentops-operators"])
    sign_in(client, agent, "jan")

    out = client.post(reverse("logout"))

    assert signed_in_as(client) is None
    assert out.status_code == 302
    at_provider = urlsplit(out["Location"])
    assert f"{at_provider.scheme}://{at_provider.netloc}{at_provider.path}" == (
        oidc_provider.url("/session/end")
    )
    assert parse_qs(at_provider.query)["post_logout_redirect_uri"] == ["http://127.0.0.1/login/"]
    assert provider_sign_out(agent, out["Location"]) == "http://127.0.0.1/login/"
    # The provider asks for the password again: its session ended too.
    again = client.get(reverse("oidc_authentication_init"))
    page = agent.get(again["Location"], follow_redirects=True)
    assert 'name="password"' in page.text


def test_with_local_passwords_off_the_provider_is_the_only_way_in(
    oidc_settings, oidc_provider, client, django_user_model
):
    django_user_model.objects.create_user(username="kim", password="local-pw", is_staff=True)
    oidc_settings.AGENTOPS = {**oidc_settings.AGENTOPS, "LOCAL_PASSWORDS": False}

    page = client.get(reverse("login")).content.decode()
    posted = client.post(reverse("login"), {"username": "kim", "password": "local-pw"})
    admin = client.post("/admin/login/", {"username": "kim", "password": "local-pw"})

    assert PROVIDER_NAME in page and reverse("oidc_authentication_init") in page
    assert 'name="password"' not in page
    assert (posted.status_code, admin.status_code) == (403, 403)
    assert "Passwords are turned off" in posted.content.decode()
    assert signed_in_as(client) is None
    assert authenticate(username="kim", password="local-pw") is None


def test_with_passwords_on_the_page_offers_both_and_a_password_still_signs_in(
    oidc_settings, client, django_user_model
):
    django_user_model.objects.create_user(username="lee", password="local-pw")

    page = client.get(reverse("login")).content.decode()
    posted = client.post(reverse("login"), {"username": "lee", "password": "local-pw"})

    assert PROVIDER_NAME in page and 'name="password"' in page
    assert posted.status_code == 302
    assert signed_in_as(client).username == "lee"


def test_single_sign_on_is_off_without_its_settings(client):
    assert client.get(reverse("oidc_authentication_init")).status_code == 404
    assert (
        client.get(f"{reverse('oidc_authentication_callback')}?code=a&state=b").status_code == 404
    )
    assert "oidc" not in client.get(reverse("login")).content.decode()


def test_a_partial_configuration_refuses_to_start_naming_what_it_lacks():
    result = manage(
        "check",
        env=production_env(
            AGENTOPS_OIDC_ISSUER="https://id.example.com", AGENTOPS_OIDC_CLIENT_ID="agentops"
        ),
    )

    assert result.returncode != 0
    assert "AGENTOPS_OIDC_CLIENT_SECRET" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_content_security_policy_lets_sign_out_go_on_to_the_provider():
    """The Log out form redirects to the end-session endpoint: browsers hold that redirect to
    form-action (tests/browser/test_oidc_sign_in.py signs out in Chromium)."""
    provider = "https://id.example.com"
    env = production_env(
        AGENTOPS_OIDC_ISSUER=provider,
        AGENTOPS_OIDC_CLIENT_ID="agentops",
        AGENTOPS_OIDC_CLIENT_SECRET="secret",
        AGENTOPS_OIDC_AUTHORIZATION_ENDPOINT=f"{provider}/auth",
        AGENTOPS_OIDC_TOKEN_ENDPOINT=f"{provider}/token",
        AGENTOPS_OIDC_USERINFO_ENDPOINT=f"{provider}/me",
        AGENTOPS_OIDC_JWKS_URI=f"{provider}/jwks",
        AGENTOPS_OIDC_END_SESSION_ENDPOINT="https://sso.example.com:8443/logout?realm=acme",
    )
    read = "from django.conf import settings as s; print(s.CONTENT_SECURITY_POLICY['DIRECTIVES'])"

    result = manage("shell", "-v0", "-c", read, env=env)

    assert result.returncode == 0, result.stderr
    assert "'form-action': [\"'self'\", 'https://sso.example.com:8443']" in result.stdout


def test_passwords_off_without_single_sign_on_refuses_to_start():
    result = manage("check", env=production_env(AGENTOPS_LOCAL_PASSWORDS="false"))

    assert result.returncode != 0
    assert "AGENTOPS_LOCAL_PASSWORDS" in result.stderr


def test_the_deploy_check_says_what_single_sign_on_leaves_open():
    provider = "http://id.example.com"
    env = production_env(
        AGENTOPS_SIM_BASE_URL="https://services.example.com",
        AGENTOPS_OIDC_ISSUER=provider,
        AGENTOPS_OIDC_CLIENT_ID="agentops",
        AGENTOPS_OIDC_CLIENT_SECRET="secret",
        AGENTOPS_OIDC_AUTHORIZATION_ENDPOINT=f"{provider}/auth",
        AGENTOPS_OIDC_TOKEN_ENDPOINT=f"{provider}/token",
        AGENTOPS_OIDC_USERINFO_ENDPOINT=f"{provider}/me",
        AGENTOPS_OIDC_JWKS_URI=f"{provider}/jwks",
    )

    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode != 0
    found = result.stdout + result.stderr
    assert found.count("agentops.W004") == 5  # each of the five http URLs
    assert {"agentops.I002", "agentops.I003", "agentops.I004"} <= set(
        re.findall(r"agentops\.I\d{3}", found)
    )


def test_oidc_discover_prints_the_settings_from_the_providers_discovery(oidc_provider):
    out = io.StringIO()
    call_command("oidc_discover", oidc_provider.issuer, stdout=out)

    lines = dict(line.split("=", 1) for line in out.getvalue().splitlines() if "=" in line)
    assert lines["AGENTOPS_OIDC_ISSUER"] == oidc_provider.issuer
    assert lines["AGENTOPS_OIDC_TOKEN_ENDPOINT"] == oidc_provider.url("/token")
    assert lines["AGENTOPS_OIDC_JWKS_URI"] == oidc_provider.url("/jwks")
    assert lines["AGENTOPS_OIDC_END_SESSION_ENDPOINT"] == oidc_provider.url("/session/end")
    with pytest.raises(CommandError):
        call_command("oidc_discover", f"{oidc_provider.issuer}/", stdout=io.StringIO())


@pytest.mark.parametrize(
    ("claims", "holds"),
    [
        ({"aud": "agentops"}, True),
        ({"aud": ["agentops"]}, True),
        ({"aud": ["agentops", "billing"], "azp": "agentops"}, True),
        ({"aud": ["agentops", "billing"]}, False),
        ({"aud": ["agentops", "billing"], "azp": "billing"}, False),
        ({"aud": "agentops", "azp": "billing"}, False),
        ({"aud": "agentops", "azp": "agentops"}, True),
    ],
)
def test_an_id_token_for_several_audiences_must_name_this_client_its_authorized_party(
    claims: dict[str, Any], holds: bool
) -> None:
    assert authorized_party_holds(claims, "agentops") is holds


def test_an_id_token_is_checked_with_a_minute_for_the_providers_clock(oidc_settings) -> None:
    """A token the provider's clock issued 30 s in our future is taken; one that expired two
    minutes ago is not. (Signed here with a key of the test's own: what is checked is the
    product's reading of the times, which no provider lets a test set.)"""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    backend = ProviderBackend()
    now = int(time.time())
    claims = {
        "iss": oidc_settings.AGENTOPS["OIDC"]["ISSUER"],
        "sub": "someone",
        "aud": backend.OIDC_RP_CLIENT_ID,
    }
    ahead = jwt.encode({**claims, "iat": now + 30, "exp": now + 330}, key, algorithm="RS256")
    expired = jwt.encode({**claims, "iat": now - 600, "exp": now - 120}, key, algorithm="RS256")

    assert backend.get_payload_data(ahead, key.public_key())["sub"] == "someone"
    with pytest.raises(SuspiciousOperation):
        backend.get_payload_data(expired, key.public_key())
