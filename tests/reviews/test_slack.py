"""Approving from Slack: a gate notice to a Slack route is a Block Kit message with Approve and
Reject, posted through a stand-in Slack Web API served over real HTTP (tests/slack_api.py, as
strict as Slack about the token, the method and the shapes); clicks are sent as Slack sends them,
signed with slack-sdk's reference `SignatureVerifier`. A click decides through the same command
as the browser (roles, separation of duties, the digest, the claim), logs channel `slack`, and the
message is updated by a job; an unsigned, stale, tampered or replayed request decides nothing.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agentops.engine import digest
from agentops.models import Gate
from agentops.plumbing import queues
from agentops.states import GateStatus
from reviews.models import (
    Claim,
    Decision,
    Delivery,
    NotificationRoute,
    SlackIdentity,
    SlackMessage,
)
from reviews.notifications import delivery_send, notices_find
from reviews.services import gate_approve
from reviews.services.slack import slack_link_token
from reviews.slack import slack_messages_sweep
from reviews.states import VIA_BROWSER, DeliveryChannel, DeliveryStatus
from tests import slack_api
from tests.reviews.builders import client_for, gated_refund, open_gate, slack_linked
from tests.slack_api import CHANNEL, TEAM_ID, StandInSlack, signed

pytestmark = pytest.mark.django_db

URL = "/review/slack/interactions"


def post(payload: dict[str, Any] | str, **signing: Any) -> Any:
    body, headers = signed(payload, **signing)
    return Client().post(URL, body, content_type="application/x-www-form-urlencoded", **headers)


def run_jobs() -> list[Any]:
    """Run the enqueued Slack updates as a notices' worker would (RQ's own perform), in order;
    the task's own jobs (its advance after an approval) wait on the steps' queue."""
    queue = queues.queue(queues.NOTICES)
    results = []
    for job in queue.get_jobs():
        if job.func_name == "reviews.jobs.slack_message_update":
            results.append(job.perform())
            queue.remove(job)
    return results


def gate_posted(slack: StandInSlack, **task: Any) -> tuple[Gate, slack_api.Message]:
    """A gated refund announced to the Slack route: the gate and its message in the channel."""
    NotificationRoute.objects.create(slack_channel=CHANNEL)
    gate = open_gate(gated_refund(**task))
    notices_find()
    (delivery,) = Delivery.objects.filter(channel=DeliveryChannel.SLACK)
    assert delivery_send(delivery_id=delivery.pk) == "sent"
    return gate, slack.only_message()


def gate_decisions(gate: Gate) -> list[tuple[str, str, str]]:
    return list(
        Decision.objects.filter(task_id_ref=gate.task_id, action__startswith="reviews.gate.")
        .order_by("id")
        .values_list("action", "actor_label", "channel")
    )


def test_a_gate_notice_is_a_block_kit_message_with_approve_and_reject(
    sim, redis_clean, slack, operator
):
    gate, message = gate_posted(slack)

    assert slack.refusals == []
    ((method, args),) = slack.calls
    assert method == "chat.postMessage" and args["channel"] == CHANNEL
    assert message.action_ids() == ["gate_approve", "gate_reject", "gate_open"]
    values = {
        e.get("value") for b in message.blocks if b["type"] == "actions" for e in b["elements"]
    }
    assert f"{gate.pk}:{gate.args_digest}" in values
    assert gate.tool in message.block_text() and "Refund order B2002" in message.block_text()
    assert Delivery.objects.get(channel=DeliveryChannel.SLACK).status == DeliveryStatus.SENT


def test_approve_in_slack_decides_as_the_linked_user_and_updates_the_message(
    sim, redis_clean, slack, operator, starter
):
    gate, message = gate_posted(slack, created_by=starter)
    slack_linked(slack, operator, "U0OLGA")

    response = post(slack.click(message, "gate_approve", user="U0OLGA"))
    gate.refresh_from_db()

    assert response.status_code == 200
    assert gate.status == GateStatus.APPROVED and gate.decided_by == operator
    assert gate_decisions(gate) == [("reviews.gate.approved", "olga", "slack")]
    assert run_jobs() == [f"updated gate {gate.pk} in {CHANNEL}"]
    assert message.updates == 1 and slack.refusals == []
    assert "Approved* by olga" in message.block_text()
    assert message.action_ids() == ["gate_open"]


def test_a_late_click_decides_nothing_and_says_who_decided(
    sim, redis_clean, slack, operator, operator2
):
    gate, message = gate_posted(slack)
    slack_linked(slack, operator, "U0OLGA")
    slack_linked(slack, operator2, "U0OTTO")
    first = slack.click(message, "gate_approve", user="U0OTTO")
    late = slack.click(message, "gate_approve", user="U0OLGA")

    assert post(first).status_code == 200
    assert post(late).status_code == 200
    run_jobs()

    assert gate_decisions(gate) == [("reviews.gate.approved", "otto", "slack")]
    assert "already decided by otto" in message.block_text()
    assert "<@U0OLGA>" in message.block_text()


def test_reject_opens_a_modal_and_its_reason_rejects_the_gate(sim, redis_clean, slack, operator):
    gate, message = gate_posted(slack)
    slack_linked(slack, operator, "U0OLGA")

    assert post(slack.click(message, "gate_reject", user="U0OLGA")).status_code == 200
    (modal,) = slack.views
    empty = post(slack.submit(modal, user="U0OLGA", reason=""))
    answer = post(slack.submit(modal, user="U0OLGA", reason="Wrong order: <!channel> & more"))
    gate.refresh_from_db()
    run_jobs()

    assert empty.status_code == 200 and empty.json()["response_action"] == "errors"
    assert answer.status_code == 200 and answer.content == b""
    assert gate.status == GateStatus.REJECTED
    assert gate.feedback == "Wrong order: <!channel> & more"
    assert gate_decisions(gate) == [("reviews.gate.rejected", "olga", "slack")]
    assert "Wrong order: &lt;!channel&gt; &amp; more" in message.block_text()
    assert slack.refusals == []


def test_an_unlinked_slack_user_is_sent_to_link_and_never_matched_by_name(
    sim, redis_clean, slack, operator
):
    gate, message = gate_posted(slack)
    # The Slack user is named like the operator: that links nothing.
    click = slack.click(message, "gate_approve", user="U0STRANGER", name="olga")

    assert post(click).status_code == 200
    (modal,) = slack.views
    button = modal["blocks"][-1]["elements"][0]
    path = button["url"].removeprefix("https://agentops.example.com")
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert gate_decisions(gate) == []

    # Slack says this account's email is olga's (whatever its name): it is hers to link.
    operator.email = "olga@example.com"
    operator.save(update_fields=["email"])
    slack.member_add("U0STRANGER", email="Olga@Example.com")
    browser = client_for(operator, enforce_csrf_checks=True)
    page = browser.get(path)
    assert page.status_code == 200 and "U0STRANGER" in page.content.decode()
    assert not SlackIdentity.objects.exists()  # a GET links nothing
    assert browser.post(path).status_code == 403  # no CSRF token
    token = page.context["csrf_token"]
    assert browser.post(path, {"csrfmiddlewaretoken": token}).status_code == 302
    identity = SlackIdentity.objects.get()
    assert (identity.user, identity.team_id, identity.slack_user_id) == (
        operator,
        TEAM_ID,
        "U0STRANGER",
    )

    post(slack.click(message, "gate_approve", user="U0STRANGER"))
    assert gate_decisions(gate) == [("reviews.gate.approved", "olga", "slack")]


def test_the_starter_of_a_task_cannot_approve_it_from_slack(sim, redis_clean, slack, starter):
    gate, message = gate_posted(slack, created_by=starter)
    slack_linked(slack, starter, "U0STAN")

    assert post(slack.click(message, "gate_approve", user="U0STAN")).status_code == 200
    assert post(slack.click(message, "gate_reject", user="U0STAN")).status_code == 200

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert gate_decisions(gate) == []
    assert [view["title"]["text"] for view in slack.views] == ["Not decided", "Not decided"]
    assert all("someone else must decide" in json.dumps(v) for v in slack.views)
    assert message.updates == 0


def test_a_gate_someone_else_holds_is_not_taken_over_from_slack(
    sim, redis_clean, slack, operator, operator2
):
    gate, message = gate_posted(slack)
    Claim.objects.create(task=gate.task, user=operator2)
    slack_linked(slack, operator, "U0OLGA")

    post(slack.click(message, "gate_approve", user="U0OLGA"))

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert "otto is already working on this" in json.dumps(slack.views)
    assert Claim.objects.get(task=gate.task).user == operator2


def test_a_click_on_a_changed_proposal_is_refused(sim, redis_clean, slack, operator):
    gate, message = gate_posted(slack)
    slack_linked(slack, operator, "U0OLGA")
    click = slack.click(message, "gate_approve", user="U0OLGA")
    click["actions"][0]["value"] = f"{gate.pk}:{'0' * 64}"  # a digest that is not the gate's

    assert post(click).status_code == 200

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert gate_decisions(gate) == []


def proposal_changed(gate: Gate) -> Gate:
    """The gate's proposal changed after its message was posted (as a first approver's edit of a
    two-person gate changes it): other arguments, another digest, the gate still open."""
    arguments = {**gate.arguments, "amount": "1.00"}
    Gate.objects.filter(pk=gate.pk).update(arguments=arguments, args_digest=digest(arguments))
    return Gate.objects.get(pk=gate.pk)


def refusal_texts(slack: StandInSlack) -> list[str]:
    return [json.dumps(view) for view in slack.views if view["title"]["text"] == "Not decided"]


@pytest.mark.parametrize("button", ["gate_approve", "gate_reject"])
def test_a_click_on_a_message_whose_proposal_changed_is_refused_as_stale(
    sim, redis_clean, slack, operator, button
):
    gate, message = gate_posted(slack)
    slack_linked(slack, operator, "U0OLGA")
    changed = proposal_changed(gate)

    assert post(slack.click(message, button, user="U0OLGA")).status_code == 200
    run_jobs()

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert gate_decisions(gate) == []
    (refusal,) = refusal_texts(slack)
    assert "changed since" in refusal
    assert not any(view.get("callback_id") == "gate_reject" for view in slack.views)
    # The message now shows the proposal as it is, with buttons bound to its digest, and no
    # "clicked after it was decided" note.
    values = {
        e.get("value") for b in message.blocks if b["type"] == "actions" for e in b["elements"]
    }
    assert f"{gate.pk}:{changed.args_digest}" in values
    assert "clicked after" not in message.block_text()
    assert slack.refusals == []


def test_a_rejection_is_bound_to_the_digest_the_message_showed_not_the_gates_now(
    sim, redis_clean, slack, operator
):
    gate, message = gate_posted(slack)
    slack_linked(slack, operator, "U0OLGA")
    post(slack.click(message, "gate_reject", user="U0OLGA"))
    (modal,) = slack.views
    assert json.loads(modal["private_metadata"])["digest"] == gate.args_digest
    proposal_changed(gate)  # while the modal is open

    answer = post(slack.submit(modal, user="U0OLGA", reason="not this one"))

    assert answer.status_code == 200 and answer.json()["response_action"] == "errors"
    assert "changed since" in json.dumps(answer.json()["errors"])
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert gate_decisions(gate) == []


@pytest.mark.parametrize(
    "tamper",
    ["unsigned", "wrong secret", "stale", "future", "body changed", "replayed"],
)
def test_a_request_not_freshly_signed_by_slack_decides_nothing(
    sim, redis_clean, slack, operator, tamper
):
    gate, message = gate_posted(slack)
    slack_linked(slack, operator, "U0OLGA")
    payload = slack.click(message, "gate_approve", user="U0OLGA")
    # "future" is well past the window: on a loaded machine a second or more passes between
    # signing and the check, and a timestamp just 301 s ahead would come back inside it.
    body, headers = signed(
        payload,
        secret="not-the-secret" if tamper == "wrong secret" else slack_api.SIGNING_SECRET,
        timestamp={"stale": int(time.time()) - 301, "future": int(time.time()) + 330}.get(tamper),
    )
    if tamper == "unsigned":
        headers = {}
    if tamper == "body changed":
        body = body.replace(b"U0OLGA", b"U0OTTO")
    client = Client()
    if tamper == "replayed":
        first = client.post(URL, body, content_type="application/x-www-form-urlencoded", **headers)
        assert first.status_code == 200
    before = (Decision.objects.count(), Gate.objects.get(pk=gate.pk).status)

    response = client.post(URL, body, content_type="application/x-www-form-urlencoded", **headers)

    assert response.status_code == 401
    assert (Decision.objects.count(), Gate.objects.get(pk=gate.pk).status) == before
    if tamper != "replayed":
        assert before == (0, GateStatus.OPEN)
    # The post of the notice and the account link's users.info, and no call since.
    assert [method for method, _ in slack.calls] == ["chat.postMessage", "users.info"]


def test_without_a_signing_secret_the_endpoint_does_not_exist(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "SLACK_SIGNING_SECRET": ""}

    assert Client().post(URL, b"payload=%7B%7D", content_type="x").status_code == 404
    assert Client().get(URL).status_code == 405


def test_a_slack_route_without_a_bot_token_fails_with_a_clear_error(
    sim, redis_clean, slack, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "SLACK_BOT_TOKEN": "", "NOTIFY_MAX_ATTEMPTS": 1}
    NotificationRoute.objects.create(slack_channel=CHANNEL)
    gated_refund()
    notices_find()
    delivery = Delivery.objects.get(channel=DeliveryChannel.SLACK)

    assert delivery_send(delivery_id=delivery.pk) == "attempt 1 failed"
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED
    assert "AGENTOPS_SLACK_BOT_TOKEN is not set" in delivery.last_error
    assert slack.calls == []


def test_a_channel_the_bot_is_not_in_is_retried_with_slacks_error(sim, redis_clean, slack):
    NotificationRoute.objects.create(slack_channel="C0ELSEWHERE")
    gated_refund()
    notices_find()
    delivery = Delivery.objects.get(channel=DeliveryChannel.SLACK)

    assert delivery_send(delivery_id=delivery.pk) == "attempt 1 failed"
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING
    assert "chat.postMessage: channel_not_found" in delivery.last_error


def test_the_account_page_shows_and_unlinks_the_slack_account(sim, slack, operator):
    slack_linked(slack, operator, "U0OLGA")
    browser = client_for(operator)

    assert "U0OLGA" in browser.get(reverse("reviews:account")).content.decode()
    assert browser.post(reverse("reviews:slack_unlink")).status_code == 302
    assert not SlackIdentity.objects.exists()


def test_a_slack_account_linked_to_someone_else_is_not_taken(slack, operator, operator2):
    slack_linked(slack, operator2, "U0SHARED")
    token = slack_link_token(team_id=TEAM_ID, slack_user_id="U0SHARED")
    browser = client_for(operator)

    response = browser.post(reverse("reviews:slack_link", args=[token]))

    assert response.status_code == 400
    assert "linked to another person" in response.content.decode()
    assert SlackIdentity.objects.get().user == operator2


@pytest.mark.parametrize("depth", [100_000, 5_000])
def test_a_signed_payload_nested_too_deep_is_a_bad_payload_not_an_error(slack, depth):
    response = post('{"a":' * depth + "1" + "}" * depth)

    assert response.status_code == 400
    assert response.content.decode().startswith("bad payload: ")


def test_a_tampered_link_links_nothing(operator):
    token = slack_link_token(team_id=TEAM_ID, slack_user_id="U0OLGA")
    forged = token.replace("U0OLGA", "U0OTTO")

    response = client_for(operator).post(reverse("reviews:slack_link", args=[forged + "x"]))

    assert response.status_code == 400
    assert not SlackIdentity.objects.exists()


def test_a_gate_decided_elsewhere_is_shown_on_its_message_by_the_sweep(
    sim, redis_clean, slack, operator2
):
    gate, message = gate_posted(slack)
    assert slack_messages_sweep() == 0  # the message shows the open gate

    gate_approve(gate_id=gate.pk, actor=operator2, seen_digest=gate.args_digest, via=VIA_BROWSER)
    enqueued = slack_messages_sweep()
    again = slack_messages_sweep()  # the job waits in the queue: not enqueued twice

    assert (enqueued, again) == (1, 0)
    assert run_jobs() == [f"updated gate {gate.pk} in {CHANNEL}"]
    assert "Approved* by otto" in message.block_text()
    assert message.action_ids() == ["gate_open"]
    assert SlackMessage.objects.get().shown == GateStatus.APPROVED
    assert slack_messages_sweep() == 0


def test_an_update_slack_refuses_is_retried_then_given_up_at_the_cap(
    sim, redis_clean, slack, operator, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "NOTIFY_MAX_ATTEMPTS": 3}
    gate, message = gate_posted(slack)
    slack_linked(slack, operator, "U0OLGA")
    slack.outage_status = 503

    post(slack.click(message, "gate_approve", user="U0OLGA"))
    first = run_jobs()
    kept = SlackMessage.objects.get()
    slack_messages_sweep()
    second = run_jobs()
    slack.outage_status = 0
    slack_messages_sweep()
    third = run_jobs()

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.APPROVED  # the decision stands
    assert (first, second) == (["attempt 1 failed"], ["attempt 2 failed"])
    assert "HTTPStatusError" in kept.last_error and kept.shown == GateStatus.OPEN
    assert third == [f"updated gate {gate.pk} in {CHANNEL}"]
    assert "Approved* by olga" in message.block_text()

    # A message that keeps failing is given up at the cap: the sweep stops enqueuing it.
    SlackMessage.objects.update(shown=GateStatus.OPEN)
    slack.outage_status = 503
    for _ in range(3):
        slack_messages_sweep()
        run_jobs()
    assert SlackMessage.objects.get().attempts == 3
    assert slack_messages_sweep() == 0
