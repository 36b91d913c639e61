"""The language a person reads the product in (agentops/plumbing/language.py and
reviews/services/profiles.py): their own choice on the account page, kept on their profile and
copied into each new session when they sign in, before their browser's Accept-Language, before
the site's LANGUAGE_CODE. Responses say which language they are in and that it depends on
Accept-Language; dates (agentops/formats) and amounts (gate_money, through Babel) follow it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from babel import numbers
from django.test import Client
from django.urls import reverse

from agentops.models import ApiToken
from agentops.plumbing.language import SESSION_KEY
from agentops.states import TaskStatus
from agentops.tokens import api_token_create
from reviews.models import Profile
from tests.reviews.builders import client_for
from tests.reviews.history import T0, Clock, make_gate, make_task

pytestmark = pytest.mark.django_db

ACCOUNT = reverse("reviews:account")
CHOOSE = reverse("reviews:account_language")
# A heading of the account page, and its Chinese (the catalogue's).
HEADING = {"en": "Language", "zh-hans": "语言"}
PASSWORD = "pw-for-tests"  # what tests.reviews.conftest.make_user sets


def page_language(response: Any) -> str:
    """The language a page says it is in: its Content-Language, which <html lang> must match."""
    language = response["Content-Language"]
    assert f'<html lang="{language}">' in response.content.decode()
    return language


def browser(user: Any, accept_language: str, **kwargs: Any) -> Client:
    """A client signed in as `user` whose browser prefers `accept_language`."""
    client = client_for(user, **kwargs)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = accept_language
    return client


def signed_in_anew(user: Any, accept_language: str) -> Client:
    """Another browser, in which `user` signs in through the login form."""
    client = Client(HTTP_ACCEPT_LANGUAGE=accept_language)
    response = client.post(reverse("login"), {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302, response.content.decode()[:500]
    return client


def chosen(user: Any) -> str | None:
    return Profile.objects.filter(user=user).values_list("language", flat=True).first()


# -- the browser's language ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept_language", "expected"),
    [("zh-Hans", "zh-hans"), ("zh-CN,zh;q=0.9", "zh-hans"), ("en-US,en;q=0.8", "en")],
)
def test_the_browser_s_language_chooses_the_page_s(operator, accept_language, expected):
    response = browser(operator, accept_language).get(ACCOUNT)
    assert response.status_code == 200
    assert page_language(response) == expected
    assert HEADING[expected] in response.content.decode()
    assert "Accept-Language" in response["Vary"]


@pytest.mark.parametrize("site_language", ["en", "zh-hans"])
def test_a_language_the_product_does_not_speak_gives_the_site_s(operator, settings, site_language):
    settings.LANGUAGE_CODE = site_language
    response = browser(operator, "fr-FR,fr;q=0.9").get(ACCOUNT)
    assert page_language(response) == site_language
    assert HEADING[site_language] in response.content.decode()


def test_the_login_page_follows_the_browser_for_someone_signed_out():
    response = Client(HTTP_ACCEPT_LANGUAGE="zh-Hans").get(reverse("login"))
    assert response.status_code == 200
    assert page_language(response) == "zh-hans"
    assert "Accept-Language" in response["Vary"]


# -- the choice on the account page --------------------------------------------------------------


def test_a_chosen_language_overrides_the_browser_s_and_follows_the_person_to_a_new_sign_in(
    operator,
):
    english_browser = browser(operator, "en")
    response = english_browser.post(CHOOSE, {"language": "zh-hans"})
    assert response.status_code == 302 and response["Location"] == ACCOUNT
    assert chosen(operator) == "zh-hans"
    assert english_browser.session[SESSION_KEY] == "zh-hans"
    after = english_browser.get(ACCOUNT)
    assert page_language(after) == "zh-hans"
    # Another browser, set to English, where the person signs in anew: their choice holds.
    elsewhere = signed_in_anew(operator, "en")
    assert elsewhere.session[SESSION_KEY] == "zh-hans"
    assert page_language(elsewhere.get(ACCOUNT)) == "zh-hans"


def test_choosing_the_browser_s_language_again_drops_the_choice(operator):
    Profile.objects.create(user=operator, language="zh-hans")
    client = signed_in_anew(operator, "en")
    assert page_language(client.get(ACCOUNT)) == "zh-hans"
    response = client.post(CHOOSE, {"language": ""})
    assert response.status_code == 302
    assert chosen(operator) == ""
    assert SESSION_KEY not in client.session
    assert page_language(client.get(ACCOUNT)) == "en"
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-Hans"
    assert page_language(client.get(ACCOUNT)) == "zh-hans"


@pytest.mark.parametrize("language", ["fr", "zh", "zh-Hans-CN", "x" * 40])
def test_a_language_the_product_does_not_speak_is_refused_and_nothing_changes(operator, language):
    Profile.objects.create(user=operator, language="zh-hans")
    client = signed_in_anew(operator, "en")
    response = client.post(CHOOSE, {"language": language})
    assert response.status_code == 400
    assert chosen(operator) == "zh-hans"
    assert client.session[SESSION_KEY] == "zh-hans"


def test_the_choice_needs_the_csrf_token(operator):
    client = browser(operator, "en", enforce_csrf_checks=True)
    response = client.post(CHOOSE, {"language": "zh-hans"})
    assert response.status_code == 403
    assert chosen(operator) is None
    # With the token of the account page's form it goes through.
    client.get(ACCOUNT)
    token = client.cookies["csrftoken"].value
    response = client.post(CHOOSE, {"language": "zh-hans", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert chosen(operator) == "zh-hans"


def test_someone_signed_out_cannot_choose(operator):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    response = client.post(CHOOSE, {"language": "zh-hans"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert not Profile.objects.exists()
    assert SESSION_KEY not in client.session


# -- dates and amounts ---------------------------------------------------------------------------


def test_dates_on_a_page_follow_the_language(operator):
    row, _token = api_token_create(user=operator, name="nightly export")
    ApiToken.objects.filter(pk=row.pk).update(created_at=datetime(2026, 12, 7, 18, 25, tzinfo=UTC))
    english = browser(operator, "en").get(ACCOUNT).content.decode()
    chinese = browser(operator, "zh-Hans").get(ACCOUNT).content.decode()
    assert "2026-12-07 18:25" in english and "2026年12月7日" not in english
    assert "2026年12月7日 18:25" in chinese and "2026-12-07" not in chinese


def test_an_amount_on_a_page_follows_the_language(operator):
    clock = Clock(T0)
    gate = make_gate(clock, make_task(clock, status=TaskStatus.AWAITING_APPROVAL), opened=T0)
    gate.amount = Decimal("1234.5")
    gate.arguments = {"amount": 1234.5, "currency": "USD"}
    gate.save(update_fields=["amount", "arguments"])
    panel = reverse("reviews:gate", args=[gate.pk])
    written = {
        language: numbers.format_currency(
            Decimal("1234.50"), "USD", locale=locale, currency_digits=False
        )
        for language, locale in (("en", "en"), ("zh-hans", "zh_Hans"))
    }
    # Babel (CLDR) writes a dollar amount differently in the two: the test can tell them apart.
    assert written["en"] != written["zh-hans"]
    for language, accept_language in (("en", "en"), ("zh-hans", "zh-Hans")):
        response = browser(operator, accept_language).get(panel)
        assert response.status_code == 200
        shown = response.content.decode()
        assert written[language] in shown
        other = written["zh-hans" if language == "en" else "en"]
        assert f">{other}<" not in shown
