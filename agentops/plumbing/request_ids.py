"""Request ids: every request gets one, every log line of it and every job it enqueues carries
it, the response returns it in `X-Request-ID`, and the 500 page shows it for an operator to quote.

A proxy's incoming `X-Request-ID` is kept when it is sane (8 to 128 letters, digits, `.`, `_`,
`-`: nothing that could forge a log field), else a new one is made. The 500 page must render
whatever is broken: it is rendered without the database (no request context, no context
processors), and when the site layout itself fails (static files not collected, a broken
template) a self-contained page takes its place.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.template import loader
from django.utils.html import escape
from django.utils.translation import get_language
from django.utils.translation import gettext as _

from agentops.plumbing.logs import request_context

logger = logging.getLogger(__name__)

HEADER = "X-Request-ID"
_SANE = re.compile(r"[A-Za-z0-9._-]{8,128}")


def request_id_for(request: HttpRequest) -> str:
    """The proxy's request id when it is sane, else a new one."""
    incoming = request.headers.get(HEADER, "")
    return incoming if _SANE.fullmatch(incoming) else uuid.uuid4().hex


class RequestIdMiddleware:
    """The outermost middleware: sets `request.request_id`, the log context and the header."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_for(request)
        request.request_id = request_id  # type: ignore[attr-defined]
        with request_context(request_id=request_id, request=request):
            response = self.get_response(request)
        response[HEADER] = request_id
        return response


_FALLBACK_PAGE = """<!doctype html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{title} · agentops</title></head>
<body><header class="topbar"><a class="brand" href="/" translate="no">agentops</a></header>
<main><h1>{heading}</h1>
<p>{logged}</p>
<p>{reference}</p>
<p><a href="/">{back}</a></p></main></body></html>
"""


def fallback_page(request_id: str) -> str:
    """The plain 500 page, in the reader's language (the same sentences as 500.html)."""
    reference = _(
        'Reference: <code translate="no">%(request_id)s</code> (quote it when you report this).'
    )
    return _FALLBACK_PAGE.format(
        lang=escape(get_language() or "en"),
        title=escape(_("Something went wrong")),
        heading=escape(_("Something went wrong on our side")),
        logged=escape(
            _(
                "The error has been logged. Nothing you sent was lost: decisions are recorded "
                "only when they are saved in full. Reload the page in a moment, or go back and "
                "try again."
            )
        ),
        reference=reference % {"request_id": escape(request_id)},
        back=escape(_("Go to the task list")),
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 handler (`handler500`): the site layout if it renders, else a plain page; both
    show the request id. Django logs the error itself, after this returns."""
    request_id = getattr(request, "request_id", None) or "-"
    try:
        html = loader.get_template("500.html").render({"request_id": request_id})
    # Why broad: this page answers for every failure, its own included (a missing static
    # manifest, a template error); the plain page below needs nothing that can fail.
    except Exception as error:
        logger.warning("the 500 page fell back to plain HTML: %s: %s", type(error).__name__, error)
        html = fallback_page(request_id)
    return HttpResponseServerError(html)
