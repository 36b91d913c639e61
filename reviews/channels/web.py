"""The product's own channels, which take decisions and deliver no notices: its pages in the
browser (every choice, on the gate and question panels) and its JSON API (approve, edit, reject,
answer; a decision records the token that made it: `Channel.via(api_token_id=...)`).
"""

from __future__ import annotations

from typing import ClassVar

from django.utils.translation import gettext_lazy

from agentops.engine import Choice
from reviews.channels import Channel
from reviews.states import DecisionChannel


class BrowserChannel(Channel):
    name = DecisionChannel.BROWSER.value
    label = gettext_lazy("Browser")
    choices: ClassVar[tuple[Choice, ...]] = (
        Choice.APPROVE,
        Choice.EDIT,
        Choice.REJECT,
        Choice.STOP,
        Choice.ANSWER,
    )


class ApiChannel(Channel):
    name = DecisionChannel.API.value
    label = "API"
    choices: ClassVar[tuple[Choice, ...]] = (
        Choice.APPROVE,
        Choice.EDIT,
        Choice.REJECT,
        Choice.ANSWER,
    )
