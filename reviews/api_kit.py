"""What the review API's modules share: their one router (`reviews.api` and `reviews.api_again`
add their endpoints to it; the project shell mounts it), the roles they ask for, the channel
a decision made through the API records, and how a service's refusal becomes an error answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ninja import Router
from ninja.errors import HttpError

from agentops.api import ApiRequest, TokenAuth
from reviews.services import NotAllowed, ReviewError
from reviews.states import Via

Refusals = tuple[type[Exception], ...]

READ_REVIEWS = "reviews.read_reviews"
DECIDE_GATE = "reviews.decide_gate"

router = Router()


def readers_only(what: str) -> TokenAuth:
    return TokenAuth(READ_REVIEWS, f"{what} for operators and auditors")


def api_via(request: ApiRequest) -> Via:
    """The channel of a decision made with the request's token."""
    return Via.api(request.auth.pk)


@contextmanager
def refusals(
    *,
    missing: str = "",
    not_found: Refusals = (),
    conflicts: Refusals = (),
    invalid: Refusals = (),
) -> Iterator[None]:
    """Answer a service's refusal inside the block with the API's error: `not_found` is 404
    (saying `missing`); `conflicts` (decided first, a stale digest, held by someone else, a
    refused transition: whichever the endpoint answers so) 409; NotAllowed 403; any other
    ReviewError, and `invalid`, 400."""
    invalid = (ReviewError, *invalid)
    try:
        yield
    except not_found:
        raise HttpError(404, missing) from None
    except conflicts as exc:
        raise HttpError(409, str(exc)) from None
    except NotAllowed as exc:
        raise HttpError(403, str(exc)) from None
    except invalid as exc:
        raise HttpError(400, str(exc)) from None
