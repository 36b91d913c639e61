"""What the review API's modules share: their one router (`reviews.api` and `reviews.api_again`
add their endpoints to it; the project shell mounts it), the roles they ask for, the channel a
decision made through the API records, and the answer to acting on an item someone else holds."""

from __future__ import annotations

from ninja import Router
from ninja.errors import HttpError

from agentops.api import ApiRequest, TokenAuth
from reviews.services import HeldByOther
from reviews.states import Via

READ_REVIEWS = "reviews.read_reviews"
DECIDE_GATE = "reviews.decide_gate"

router = Router()


def readers_only(what: str) -> TokenAuth:
    return TokenAuth(READ_REVIEWS, f"{what} for operators and auditors")


def api_via(request: ApiRequest) -> Via:
    """The channel of a decision made with the request's token."""
    return Via.api(request.auth.pk)


def held_by_other(exc: HeldByOther) -> HttpError:
    """The API's answer to deciding or changing an item someone else holds (claimed in the
    inbox): 409, whatever the item (a gate, a question, a grant, a plan), and nothing done. The
    API takes nothing over: the holder releases it, or a person takes it over in the inbox."""
    return HttpError(
        409,
        f"{exc.holder} is already working on this task (claimed in the inbox): nothing was "
        "done; they release it, or you take it over in the inbox, before you act on it",
    )
