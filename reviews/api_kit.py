"""What the review API's modules share: their one router (`reviews.api` and `reviews.api_again`
add their endpoints to it; the project shell mounts it), the roles they ask for, and the channel
a decision made through the API records."""

from __future__ import annotations

from ninja import Router

from agentops.api import ApiRequest, TokenAuth
from reviews.states import Via

READ_REVIEWS = "reviews.read_reviews"
DECIDE_GATE = "reviews.decide_gate"

router = Router()


def readers_only(what: str) -> TokenAuth:
    return TokenAuth(READ_REVIEWS, f"{what} for operators and auditors")


def api_via(request: ApiRequest) -> Via:
    """The channel of a decision made with the request's token."""
    return Via.api(request.auth.pk)
