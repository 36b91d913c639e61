"""Linking a Slack account: the link the Slack app sends names one Slack user, but anyone holding
it could open it, so the product asks Slack (`users.info`, on the stand-in Web API served over
HTTP, as strict as Slack) who that user is and links only a live member of the link's workspace
whose profile email is the signed-in person's email, compared without regard to case. An
attacker's link opened by an operator, a Slack that does not answer, and every other mismatch
link nothing and say why.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.db import transaction
from django.urls import reverse

from agentops.engine.outbound import OutboundInTransaction
from reviews.models import SlackIdentity
from reviews.services import NotAllowed
from reviews.services.slack import SlackUnconfirmed, slack_identity_link, slack_link_token
from reviews.slack_web import SlackError, slack_call
from tests.reviews.builders import client_for
from tests.slack_api import BOT_TOKEN, TEAM_ID, StandInSlack

pytestmark = pytest.mark.django_db


def with_email(user: Any, email: str) -> Any:
    user.email = email
    user.save(update_fields=["email"])
    return user


def link_page(slack_user_id: str) -> str:
    token = slack_link_token(team_id=TEAM_ID, slack_user_id=slack_user_id)
    return reverse("reviews:slack_link", args=[token])


def confirm(user: Any, slack_user_id: str) -> Any:
    """`user` opens the link naming `slack_user_id` and confirms it, as in the browser (CSRF)."""
    browser = client_for(user, enforce_csrf_checks=True)
    path = link_page(slack_user_id)
    page = browser.get(path)
    assert page.status_code == 200
    return browser.post(path, {"csrfmiddlewaretoken": page.context["csrf_token"]})


def user_info_calls(slack: StandInSlack) -> list[dict[str, Any]]:
    return [args for method, args in slack.calls if method == "users.info"]


def test_an_attackers_link_opened_by_an_operator_links_nothing(slack, operator):
    with_email(operator, "olga@example.com")
    # The attacker clicked a button in Slack and forwarded the link they got to the operator.
    slack.member_add("U0MALLORY", email="mallory@evil.example")

    response = confirm(operator, "U0MALLORY")

    assert response.status_code == 403
    page = response.content.decode()
    assert "Nothing was linked" in page and "not the email of your agentops account" in page
    assert not SlackIdentity.objects.exists()
    assert user_info_calls(slack) == [{"user": "U0MALLORY"}]
    assert slack.refusals == []


def test_a_slack_account_with_the_persons_email_is_linked(slack, operator):
    with_email(operator, "olga@example.com")
    slack.member_add("U0OLGA", email="olga@example.com")

    response = confirm(operator, "U0OLGA")

    assert response.status_code == 302 and response["Location"] == reverse("reviews:account")
    identity = SlackIdentity.objects.get()
    assert (identity.user, identity.team_id, identity.slack_user_id) == (
        operator,
        TEAM_ID,
        "U0OLGA",
    )
    assert user_info_calls(slack) == [{"user": "U0OLGA"}]
    assert slack.refusals == []


def test_emails_that_differ_only_in_case_are_the_same_person(slack, operator):
    with_email(operator, "Olga.Nunes@Example.COM")
    slack.member_add("U0OLGA", email="olga.nunes@example.com")

    assert confirm(operator, "U0OLGA").status_code == 302
    assert SlackIdentity.objects.get().user == operator


@pytest.mark.parametrize("outage", ["down", "too slow"])
def test_when_slack_cannot_confirm_nothing_is_linked_and_the_person_may_try_again(
    slack, operator, settings, outage
):
    with_email(operator, "olga@example.com")
    slack.member_add("U0OLGA", email="olga@example.com")
    settings.AGENTOPS = {**settings.AGENTOPS, "SLACK_TIMEOUT_SECONDS": 0.3}
    if outage == "down":
        slack.outage_status = 503
    else:
        slack.delay = 2.0
    browser = client_for(operator)
    path = link_page("U0OLGA")

    refused = browser.post(path)
    slack.outage_status, slack.delay = 0, 0.0
    again = browser.post(path)

    assert refused.status_code == 503
    page = refused.content.decode()
    assert "could not confirm this Slack account with Slack" in page and "try again" in page
    assert f'action="{path}"' in page  # the Try again form
    assert again.status_code == 302
    assert SlackIdentity.objects.get().user == operator


@pytest.mark.parametrize(
    ("member", "says"),
    [
        ({"deleted": True}, "deactivated or a bot"),
        ({"is_bot": True}, "deactivated or a bot"),
        ({"team_id": "T0ELSEWHERE"}, "not of the workspace"),
    ],
)
def test_a_deactivated_bot_or_foreign_slack_account_is_refused(slack, operator, member, says):
    with_email(operator, "olga@example.com")
    slack.member_add("U0OLGA", email="olga@example.com", **member)

    response = confirm(operator, "U0OLGA")

    assert response.status_code == 403 and says in response.content.decode()
    assert not SlackIdentity.objects.exists()


def test_a_person_without_an_email_or_an_unknown_slack_user_is_refused(slack, operator):
    token = slack_link_token(team_id=TEAM_ID, slack_user_id="U0OLGA")
    slack.member_add("U0OLGA", email="olga@example.com")

    with pytest.raises(NotAllowed, match="has no email address"):
        slack_identity_link(user=operator, token=token)
    assert user_info_calls(slack) == []  # refused before asking Slack

    with_email(operator, "olga@example.com")
    with pytest.raises(NotAllowed, match="Slack does not know this Slack account"):
        slack_identity_link(
            user=operator, token=slack_link_token(team_id=TEAM_ID, slack_user_id="U0GHOST")
        )
    assert not SlackIdentity.objects.exists()


def test_without_the_email_scopes_nothing_is_linked_and_the_scope_is_named(slack, operator):
    with_email(operator, "olga@example.com")
    slack.member_add("U0OLGA", email="olga@example.com")
    token = slack_link_token(team_id=TEAM_ID, slack_user_id="U0OLGA")

    slack.scopes.discard("users:read.email")  # Slack leaves the email out
    with pytest.raises(NotAllowed, match=r"users:read\.email"):
        slack_identity_link(user=operator, token=token)
    slack.scopes.discard("users:read")  # Slack refuses the call
    with pytest.raises(SlackUnconfirmed, match="missing_scope"):
        slack_identity_link(user=operator, token=token)

    assert not SlackIdentity.objects.exists()


def test_slack_is_never_asked_inside_a_transaction(slack, operator):
    with_email(operator, "olga@example.com")
    slack.member_add("U0OLGA", email="olga@example.com")
    token = slack_link_token(team_id=TEAM_ID, slack_user_id="U0OLGA")

    with transaction.atomic(), pytest.raises(OutboundInTransaction):
        slack_identity_link(user=operator, token=token)

    assert slack.calls == [] and not SlackIdentity.objects.exists()


# -- the stand-in's users.info is Slack's ---------------------------------------------------------


def raw(slack: StandInSlack, verb: str, **request: Any) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.request(verb, f"{slack.url}/users.info", **request).json()
    return answer


def test_the_stand_ins_users_info_takes_what_slack_takes(slack):
    slack.member_add("U0OLGA", email="olga@example.com")
    bearer = {"Authorization": f"Bearer {BOT_TOKEN}"}

    by_get = raw(slack, "GET", params={"user": "U0OLGA"}, headers=bearer)
    by_form = raw(slack, "POST", data={"user": "U0OLGA"}, headers=bearer)
    as_json = raw(slack, "POST", json={"user": "U0OLGA"}, headers=bearer)
    no_user = raw(slack, "POST", data={"user": ""}, headers=bearer)
    unknown = raw(slack, "GET", params={"user": "U0NOBODY"}, headers=bearer)
    unauthed = raw(slack, "GET", params={"user": "U0OLGA"})
    wrong = raw(slack, "GET", params={"user": "U0OLGA"}, headers={"Authorization": "Bearer x"})
    in_query = raw(slack, "GET", params={"user": "U0OLGA", "token": BOT_TOKEN}, headers=bearer)
    slack.scopes.discard("users:read")
    unscoped = raw(slack, "GET", params={"user": "U0OLGA"}, headers=bearer)

    assert by_get == by_form and by_get["ok"] is True
    assert by_get["user"]["profile"]["email"] == "olga@example.com"
    assert by_get["user"]["team_id"] == TEAM_ID and by_get["user"]["deleted"] is False
    # Slack reads no arguments from a JSON body here: the user is missing.
    assert as_json == no_user == unknown == {"ok": False, "error": "user_not_found"}
    assert unauthed == {"ok": False, "error": "not_authed"}
    assert wrong == {"ok": False, "error": "invalid_auth"}
    assert in_query == {"ok": False, "error": "invalid_arguments"}
    assert unscoped["error"] == "missing_scope" and unscoped["needed"] == "users:read"
    assert "users:read" not in unscoped["provided"].split(",")


def test_the_client_sends_users_info_as_a_form_with_the_bearer_token(slack):
    slack.member_add("U0OLGA", email="olga@example.com")

    answer = slack_call("users.info", {"user": "U0OLGA"})
    with pytest.raises(SlackError, match="user_not_found") as refused:
        slack_call("users.info", {"user": "U0NOBODY"})

    assert answer["user"]["id"] == "U0OLGA"
    assert refused.value.error == "user_not_found"
    assert [error for _, error, _ in slack.refusals] == ["user_not_found"]


def test_a_link_page_says_whose_email_must_match(slack, operator, django_user_model):
    with_email(operator, "olga@example.com")
    page = client_for(operator).get(link_page("U0OLGA")).content.decode()
    nobody = django_user_model.objects.create_user(username="noemail", password="x")
    bare = client_for(nobody).get(link_page("U0OLGA")).content.decode()

    assert "olga@example.com" in page
    assert "your account has none yet" in bare
    assert slack.calls == []  # a GET asks Slack nothing
