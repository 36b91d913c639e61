"""Slack with the real processes: a worker parks a refund at its gate, the sweeper and a worker
post it to the stand-in Slack, a signed click approves it while Slack is down, and the update is
retried by the sweep until Slack answers; the worker then runs the approved refund.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agentops.engine import task_create
from agentops.models import Gate, Task
from agentops.states import GateStatus, TaskStatus
from reviews.models import Decision, NotificationRoute, SlackMessage
from tests import slack_api
from tests.conftest import wait_for
from tests.reviews.builders import slack_linked
from tests.slack_api import CHANNEL, signed


@pytest.mark.django_db(transaction=True)
def test_a_click_in_slack_approves_and_the_message_follows_through_an_outage(
    processes: Any, operator: Any, settings: Any
) -> None:
    slack, server = slack_api.serve()
    try:
        config = {
            "AGENTOPS_SLACK_BOT_TOKEN": slack_api.BOT_TOKEN,
            "AGENTOPS_SLACK_SIGNING_SECRET": slack_api.SIGNING_SECRET,
            "AGENTOPS_SLACK_API_URL": slack.url,
            "AGENTOPS_PUBLIC_URL": "https://agentops.example.com",
            "AGENTOPS_NOTIFY_BACKOFF_SECONDS": "0.5",
        }
        processes.env.update(config)
        settings.AGENTOPS = {
            **settings.AGENTOPS,
            "SLACK_BOT_TOKEN": slack_api.BOT_TOKEN,
            "SLACK_SIGNING_SECRET": slack_api.SIGNING_SECRET,
            "SLACK_API_URL": slack.url,
            "PUBLIC_URL": "https://agentops.example.com",
        }
        NotificationRoute.objects.create(slack_channel=CHANNEL)
        slack_linked(slack, operator, "U0OLGA")
        task = task_create(agent="refund", goal="Refund order B2002", input={"order_id": "B2002"})
        processes.worker()
        processes.notices_worker()
        processes.sweeper()

        message = wait_for(
            lambda: next(iter(slack.messages.values()), None),
            timeout=90,
            message="the gate's message in Slack",
        )
        slack.outage_status = 503
        body, headers = signed(slack.click(message, "gate_approve", user="U0OLGA"))
        response = Client().post(
            "/review/slack/interactions",
            body,
            content_type="application/x-www-form-urlencoded",
            **headers,
        )
        assert response.status_code == 200
        wait_for(
            lambda: SlackMessage.objects.filter(last_error__contains="503").exists(),
            timeout=30,
            message="an update attempt that met the outage",
        )
        slack.outage_status = 0
        wait_for(
            lambda: "Approved* by olga" in message.block_text(),
            timeout=60,
            message="the message to show the approval",
        )
        wait_for(
            lambda: Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED,
            timeout=90,
            message="the approved refund to run",
        )
        # The job records what it showed after Slack answered (no transaction is open over the
        # call): the message in Slack can be ahead of its row for a moment.
        wait_for(
            lambda: SlackMessage.objects.filter(shown=GateStatus.APPROVED).exists(),
            timeout=30,
            message="the kept message's row to record the approval it shows",
        )
    finally:
        server.shutdown()
        server.server_close()

    kept = SlackMessage.objects.get()
    assert Gate.objects.get(task=task).status == GateStatus.APPROVED
    assert list(Decision.objects.filter(task_id_ref=task.pk).values_list("channel", flat=True)) == [
        "slack"
    ]
    assert kept.shown == GateStatus.APPROVED and kept.attempts == 0
    assert [method for method, _ in slack.calls].count("chat.postMessage") == 1
    assert message.action_ids() == ["gate_open"]
    assert slack.refusals == []
