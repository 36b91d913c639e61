"""The simulated services' answers when something breaks on their side: always JSON.

While their database is away (restarting, failing over) they answer 503 with a JSON body and a
`Retry-After`, as a real API behind a load balancer does, so a caller sees a clear, retryable
refusal instead of a stack trace. Any other error is a JSON 500 (`server_error`): the product's
error page extends the site layout, whose links do not exist in this process's URLconf.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

# A database that went away, is restarting or refused the connection. The simulated services
# reach it through the ORM only, so Django's wrapped errors are all they can see.
DATABASE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)

# What a caller is told to wait: about as long as a restart of the database takes.
RETRY_AFTER_SECONDS = 2


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DATABASE_ERRORS):
            return None
        logger.warning(
            "sim: database unavailable, answering 503",
            extra={"dependency": "postgresql", "status_code": 503},
        )
        response = JsonResponse(
            {"error": "service unavailable: its database is not answering; retry later"},
            status=503,
        )
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


def server_error(request: HttpRequest) -> JsonResponse:
    """handler500 of the simulated services."""
    return JsonResponse({"error": "internal error"}, status=500)
