"""Channels: where people hear about gates and stopped tasks, and where they decide gates. A
channel is one `Channel` registered by its name (`channel_register`); nothing else names it.

A channel may deliver notices (email, a webhook, Slack: `deliveries` says which deliveries of a
notice it makes from its audience, `deliver` sends one, with no transaction open), may take
decisions (the browser, the API, Slack's buttons, an email's links: `choices` says which, and
`choices_for` asks the gate's approval kind which of them it offers now), or both. Whatever the
channel, a decision goes through the one decision service (`reviews.services.gate_decide` and
the function of each choice) with the channel as data (`Channel.via()`), recorded on the
decision.

The built-in channels are registered when the app is ready (`reviews.apps`), in this order:
`email`, `webhook`, `slack` (`reviews.channels.{email,webhook,slack}`), then `browser` and `api`
(`reviews.channels.web`); a channel of another app registers in its own `AppConfig.ready()`.
Notifications fan a notice out to every registered channel in registration order and send each
delivery through the channel it names (`reviews.notifications`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from agentops.engine import Choice, approval_kind_of
from reviews.states import DecisionChannel, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import StrOrPromise

    from agentops.models import Gate
    from reviews.models import Delivery, Notice, NotificationRoute

# A channel's name is stored on each delivery and decision (`Delivery.channel`,
# `Decision.channel`).
NAME_MAX = 20


class DeliveryRefused(Exception):
    """The receiver answered, but refused the delivery (a webhook's non-2xx, a chat API's error):
    the attempt failed and is retried with backoff."""


@dataclass(frozen=True)
class Audience:
    """Who a notice is for, found once per notice (`reviews.notifications`): the people (active
    members of the routed groups, or without a route of the groups the gate waits for; never the
    task's starter nor an earlier approver for a gate; their notification preference loaded), the
    notification routes that match the notice (a channel with targets of its own, such as a
    webhook endpoint or a Slack channel ID, reads them there), and the moment the deliveries are
    made."""

    people: tuple[User, ...]
    routes: tuple[NotificationRoute, ...]
    now: datetime


class Channel:
    """One channel. Subclasses set `name` (at most 20 characters, unique) and `label`; a
    channel that delivers notices overrides `deliveries` and `deliver`; one that takes
    decisions lists its `choices` and decides through `reviews.services` with `via()`."""

    name: ClassVar[str]
    # What a person calls it (the decision log's Channel column), in their language.
    label: ClassVar[StrOrPromise]
    # The decisions a person can make through this channel itself (its buttons, links, forms).
    choices: ClassVar[tuple[Choice, ...]] = ()
    # The errors of `deliver` that count as a failed attempt (retried with backoff) besides
    # DeliveryRefused and network errors (httpx.HTTPError, OSError).
    failures: ClassVar[tuple[type[Exception], ...]] = ()

    def deliveries(self, notice: Notice, audience: Audience) -> list[Delivery]:
        """The deliveries of `notice` through this channel, unsaved (the caller saves them with
        the notice, in its transaction). None by default: a channel that only takes decisions."""
        return []

    def deliver(self, delivery: Delivery, link: str) -> None:
        """Send `delivery` (its notice, with `link` to the notice's page), with no transaction
        open and within the channel's deadline. Raising fails the attempt."""
        raise DeliveryRefused(f"the {self.name} channel delivers no notices")

    def choices_for(self, gate: Gate) -> tuple[Choice, ...]:
        """The decisions on `gate` a person can make through this channel now: this channel's
        choices that the gate's approval kind offers. A gate whose kind takes an answer (an
        agent's question) is decided where it can be answered, so a channel that takes no answer
        offers nothing for it (not even declining it)."""
        kind = approval_kind_of(gate)
        if kind.takes_answer and Choice.ANSWER not in self.choices:
            return ()
        return tuple(choice for choice in self.choices if kind.offers(choice))

    def via(self, *, api_token_id: int | None = None) -> Via:
        """The channel as the decision services record it on a decision."""
        return Via(self.name, api_token_id)


_CHANNELS: dict[str, Channel] = {}


def channel_register(channel: Channel) -> Channel:
    """Make `channel` known by its name: it receives notices from the next fan-out on, and its
    name is its decisions' channel. Registering the same class again is harmless; another
    channel under a taken name is a ValueError."""
    if not 0 < len(channel.name) <= NAME_MAX:
        raise ValueError(f"a channel's name has 1 to {NAME_MAX} characters: {channel.name!r}")
    known = _CHANNELS.setdefault(channel.name, channel)
    if known is not channel and type(known) is not type(channel):
        raise ValueError(f"a channel named {channel.name!r} is registered already")
    return known


def channel_unregister(name: str) -> None:
    """Forget the channel `name` (its deliveries still pending fail: nothing sends them)."""
    _CHANNELS.pop(name, None)


def channel_get(name: str) -> Channel:
    """The registered channel `name`; LookupError when none is."""
    try:
        return _CHANNELS[name]
    except KeyError:
        raise LookupError(f"no channel named {name!r} is registered") from None


def channels() -> tuple[Channel, ...]:
    """The registered channels, in registration order."""
    return tuple(_CHANNELS.values())


def channel_label(name: str) -> str:
    """What to call the channel `name` in the decision log: the decision channel's label (the
    built-in ones, the system, the command line, unknown), else the registered channel's, else
    the name."""
    if name in DecisionChannel.values:
        return str(DecisionChannel(name).label)
    if name in _CHANNELS:
        return str(_CHANNELS[name].label)
    return name
