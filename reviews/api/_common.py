"""What the review API's modules share: their one router (each module of `reviews.api` adds its
endpoints to it; the project shell mounts it as `reviews.api.router`), the roles they ask for,
the channel a decision made through the API records, how a service's refusal becomes an error
answer (acting on an item someone else holds included), and the answer of a gate decision."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from ninja import Router
from ninja.errors import HttpError

from agentops.api import ApiRequest, TokenAuth
from agentops.engine import message_of
from agentops.models import Gate
from reviews.channels import channel_get
from reviews.services import GateAlreadyDecided, HeldByOther, NotAllowed, ReviewError
from reviews.states import DecisionChannel, Via

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

Refusals = tuple[type[Exception], ...]

READ_REVIEWS = "reviews.read_reviews"
DECIDE_GATE = "reviews.decide_gate"

router = Router()


def readers_only(refusal: StrOrPromise) -> TokenAuth:
    """For the readers of the review workspace (operators and auditors); `refusal` is the 403's
    sentence, lazily translated (written in the request's language)."""
    return TokenAuth(READ_REVIEWS, refusal)


QUEUE_READERS = readers_only(gettext_lazy("the review queues are for operators and auditors"))
GATE_READERS = readers_only(gettext_lazy("gates are for operators and auditors"))
GRANT_READERS = readers_only(gettext_lazy("scope grants are for operators and auditors"))
AUDIT_READERS = readers_only(gettext_lazy("the audit queue is for operators and auditors"))


def api_via(request: ApiRequest) -> Via:
    """The channel of a decision made with the request's token: the API, and the token."""
    return channel_get(DecisionChannel.API).via(api_token_id=request.auth.pk)


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
    refused transition: whichever the endpoint answers so) 409; an item someone else holds 409
    (`held_by_other`), whatever the endpoint; NotAllowed 403; any other ReviewError, and
    `invalid`, 400."""
    invalid = (ReviewError, *invalid)
    try:
        yield
    except not_found:
        raise HttpError(404, missing) from None
    except HeldByOther as exc:
        raise held_by_other(exc) from None
    except conflicts as exc:
        raise HttpError(409, message_of(exc)) from None
    except NotAllowed as exc:
        raise HttpError(403, message_of(exc)) from None
    except invalid as exc:
        raise HttpError(400, message_of(exc)) from None


def held_by_other(exc: HeldByOther) -> HttpError:
    """The API's answer to deciding or changing an item someone else holds (claimed in the
    inbox): 409, whatever the item (a gate, a question, a grant, a plan), and nothing done. The
    API takes nothing over: the holder releases it, or a person takes it over in the inbox."""
    return HttpError(
        409,
        _(
            "%(holder)s is already working on this task (claimed in the inbox): nothing was "
            "done; they release it, or you take it over in the inbox, before you act on it"
        )
        % {"holder": exc.holder},
    )


def decided_gate(gate_id: int, apply: Callable[[], object]) -> Gate:
    """Run one gate decision (`apply`: one call of the decision service; the caller's role was
    checked by `TokenAuth`) and answer the gate as it is then; the service's refusals become 404,
    409, 403 and 400."""
    with refusals(
        missing=_("no gate %(id)s") % {"id": gate_id},
        not_found=(Gate.DoesNotExist,),
        conflicts=(GateAlreadyDecided,),
    ):
        apply()
    return Gate.objects.select_related("decided_by").get(pk=gate_id)


# Deciding gates and answering questions.
OPERATORS_ONLY = TokenAuth(DECIDE_GATE, gettext_lazy("deciding gates is for operators"))
