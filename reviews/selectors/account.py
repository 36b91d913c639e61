"""Reads behind a person's account page: their API tokens and their recent
notification deliveries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentops.models import ApiToken
from reviews.models import Delivery

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def api_token_list(*, user: User) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=user))


def delivery_list_for(*, user: User, limit: int = 20) -> list[Delivery]:
    """The latest notifications sent (or being sent) to `user`."""
    return list(Delivery.objects.filter(user=user).select_related("notice")[:limit])
