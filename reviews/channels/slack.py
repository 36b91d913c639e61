"""The Slack channel: a notice to each Slack channel ID its routes name, posted by the app's bot
(`reviews.slack`: Block Kit, the message kept so it follows its gate), and, for a gate, Approve
and Reject buttons whose signed clicks decide it through the one decision service
(`reviews.slack_interactions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from agentops.engine import Choice
from reviews.channels import Audience, Channel
from reviews.models import Delivery
from reviews.slack import slack_notice_post
from reviews.slack_web import SlackError
from reviews.states import DeliveryChannel

if TYPE_CHECKING:
    from reviews.models import Notice


class SlackChannel(Channel):
    name = DeliveryChannel.SLACK.value
    label = "Slack"
    choices: ClassVar[tuple[Choice, ...]] = (Choice.APPROVE, Choice.REJECT)
    failures: ClassVar[tuple[type[Exception], ...]] = (SlackError,)

    def deliveries(self, notice: Notice, audience: Audience) -> list[Delivery]:
        return [
            Delivery(
                notice=notice,
                channel=self.name,
                slack_channel=slack_channel,
                next_attempt_at=audience.now,
            )
            for slack_channel in sorted(
                {route.slack_channel for route in audience.routes if route.slack_channel}
            )
        ]

    def deliver(self, delivery: Delivery, link: str) -> None:
        slack_notice_post(delivery, link)
