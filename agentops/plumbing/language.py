"""The language a request is answered in: the person's own choice (made on their account page,
kept on their profile and copied into their session when they sign in or change it, so reading it
costs no query), else their browser's (Accept-Language, as Django's LocaleMiddleware reads it),
else `settings.LANGUAGE_CODE`. No language is ever in the URL.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.middleware.locale import LocaleMiddleware
from django.utils import translation

# Where the session keeps the person's choice (reviews.services.profiles writes it).
SESSION_KEY = "agentops_language"


def language_supported(code: str | None) -> bool:
    return bool(code) and code in dict(settings.LANGUAGES)


class LanguageMiddleware(LocaleMiddleware):
    """Django's LocaleMiddleware (which also marks responses `Vary: Accept-Language` and
    `Content-Language`), with the person's choice before their browser's."""

    def process_request(self, request: HttpRequest) -> None:
        session = getattr(request, "session", None)
        chosen = session.get(SESSION_KEY, "") if session is not None else ""
        if not language_supported(chosen):
            chosen = translation.get_language_from_request(request)
        translation.activate(chosen)
        request.LANGUAGE_CODE = translation.get_language()
