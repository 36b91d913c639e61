"""The one web layer (`agentops.plumbing.web`): page-or-fragment rendering, the login-and-permission
decorator with its htmx-aware redirect, and the JSON-object form field."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from agentops.plumbing.web import JSONObjectField

pytestmark = pytest.mark.django_db

# One URL of each app, each behind the decorator with a permission (or a sign-in).
URLS = [
    ("agentops:task_list", {}),
    ("reviews:inbox", {}),
    ("policies:index", {}),
]


def _expired_client(django_user_model: Any) -> Client:
    """A browser that was signed in, whose session the server no longer has."""
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    Session.objects.all().delete()
    return client


@pytest.mark.parametrize(("name", "kwargs"), URLS)
def test_an_htmx_request_with_an_expired_session_is_sent_to_the_login_page_whole(
    django_user_model: Any, name: str, kwargs: dict[str, Any]
) -> None:
    client = _expired_client(django_user_model)
    url = reverse(name, kwargs=kwargs)

    response = client.get(url, HTTP_HX_REQUEST="true")

    # Not the login page's HTML (htmx would swap it into the polled fragment): a client-side
    # redirect that makes the browser load the whole login page, then come back.
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"{reverse('login')}?next={url}"
    assert b"<form" not in response.content


@pytest.mark.parametrize(("name", "kwargs"), URLS)
def test_a_plain_request_with_an_expired_session_gets_the_login_redirect(
    django_user_model: Any, name: str, kwargs: dict[str, Any]
) -> None:
    client = _expired_client(django_user_model)
    url = reverse(name, kwargs=kwargs)

    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"
    assert "HX-Redirect" not in response


@pytest.mark.parametrize(("name", "kwargs"), URLS[1:])
def test_a_signed_in_htmx_request_without_the_permission_gets_403(
    client: Any, django_user_model: Any, name: str, kwargs: dict[str, Any]
) -> None:
    client.force_login(django_user_model.objects.create_user("nora", password="pw"))

    response = client.get(reverse(name, kwargs=kwargs), HTTP_HX_REQUEST="true")

    assert response.status_code == 403
    assert "HX-Redirect" not in response


def test_page_and_fragment_come_from_one_template_and_vary_on_hx_request(
    client: Any, django_user_model: Any
) -> None:
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    url = reverse("agentops:task_list")

    page = client.get(url)
    fragment = client.get(url, HTTP_HX_REQUEST="true")
    restore = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")

    assert "HX-Request" in page["Vary"] and "HX-Request" in fragment["Vary"]
    assert page.content.decode().lstrip().lower().startswith("<!doctype html>")
    assert fragment.content.decode().lstrip().startswith('<section id="task-table"')
    assert '<section id="task-table"' in page.content.decode()
    # A history restore after a cache miss needs the whole page.
    assert restore.content.decode().lstrip().lower().startswith("<!doctype html>")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a": ', "The input is not valid JSON"),
        ("[1]", 'The input must be a JSON object, like {"key": "value"}; got an array.'),
        ('"' + "x" * 21 + '"', "Too large: 23 characters, the limit is 20."),
    ],
)
def test_the_json_object_field_says_what_is_wrong(text: str, says: str) -> None:
    field = JSONObjectField(noun="input", max_chars=20, required=False)

    with pytest.raises(Exception) as caught:
        field.clean(text)

    assert says in " ".join(caught.value.messages)


def test_the_json_object_field_takes_an_object_and_an_empty_optional_text() -> None:
    optional = JSONObjectField(noun="input", required=False)
    required = JSONObjectField(noun="arguments", plural=True)

    assert optional.clean('  {"a": 1} ') == {"a": 1}
    assert optional.clean("") == {}
    assert required.clean("{}") == {}
    with pytest.raises(Exception, match="required"):
        required.clean("  ")


def test_the_json_object_field_refuses_a_value_nested_too_deeply() -> None:
    """Deep nesting breaks the parser (RecursionError) or, once parsed, the check that stores it:
    either way a clear message, not a server error."""

    def recurse(value: Any, noun: str) -> Any:
        return recurse(value, noun)

    parsing = JSONObjectField(noun="input", required=False)
    checking = JSONObjectField(noun="arguments", plural=True, check=recurse)

    with pytest.raises(ValidationError) as deep_text:
        parsing.clean('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValidationError) as deep_check:
        checking.clean('{"a": 1}')

    assert deep_text.value.messages == ["The input is nested too deeply."]
    assert deep_check.value.messages == ["The arguments are nested too deeply."]


@pytest.mark.django_db
def test_every_page_carries_a_content_security_policy_without_inline_code(django_user_model):
    staff = django_user_model.objects.create_user("sam", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)

    for path in ("/login/", "/", "/admin/", "/api/v1/docs"):
        policy = client.get(path)["Content-Security-Policy"]
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["script-src"] == "'self'", path
        assert directives["style-src"] == "'self'", path
        assert directives["frame-ancestors"] == "'none'", path
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, path
    # The RQ dashboard is django-rq's pages, with inline scripts: staff only, and left out.
    assert "Content-Security-Policy" not in client.get("/admin/rq/")
