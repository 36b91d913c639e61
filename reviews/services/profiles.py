"""Writes behind a person's profile: the language they read the product in.

The choice is kept on their profile (it follows them to every browser) and copied into their
session, where agentops.plumbing.language reads it on every request without a query: when they
change it, and when they sign in (`language_to_session`, on `user_logged_in`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.sessions.backends.base import SessionBase

from agentops.plumbing.language import SESSION_KEY, language_supported
from reviews.models import Profile
from reviews.selectors.account import language_chosen

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def language_choose(*, user: User, language: str, session: SessionBase) -> None:
    """Keep `language` ("" for the browser's) as `user`'s choice, in their profile and session."""
    if language and not language_supported(language):
        raise ValueError(f"not a language of the product: {language!r}")
    Profile.objects.update_or_create(user=user, defaults={"language": language})
    _session_language_set(session, language)


def language_to_session(sender: Any, *, request: Any, user: User, **kwargs: Any) -> None:
    """On sign-in (`user_logged_in`): the person's chosen language into their new session."""
    session = getattr(request, "session", None)
    if session is not None:
        _session_language_set(session, language_chosen(user=user))


def _session_language_set(session: SessionBase, language: str) -> None:
    if language:
        session[SESSION_KEY] = language
    else:
        session.pop(SESSION_KEY, None)
