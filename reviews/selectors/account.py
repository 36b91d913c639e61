"""Reads behind a person's account page: their language, their API tokens and their recent
notification deliveries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings

from agentops.models import ApiToken
from agentops.plumbing.language import language_supported
from reviews.models import Delivery, Profile

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def api_token_list(*, user: User) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=user))


def delivery_list_for(*, user: User, limit: int = 20) -> list[Delivery]:
    """The latest notifications sent (or being sent) to `user`."""
    return list(Delivery.objects.filter(user=user).select_related("notice")[:limit])


def language_chosen(*, user: User) -> str:
    """The language `user` chose on their account page, or "" (their browser's)."""
    chosen = Profile.objects.filter(user=user).values_list("language", flat=True).first()
    return chosen if chosen and language_supported(chosen) else ""


def language_for(user: User | None) -> str:
    """The language to write to `user` in when they are not there to ask (an email, a message):
    their choice, else the site's (`LANGUAGE_CODE`). Wrap the rendering in
    `translation.override(language_for(user))`."""
    chosen = language_chosen(user=user) if user is not None and user.pk else ""
    return chosen or settings.LANGUAGE_CODE
