"""Health endpoints for load balancers, answered before any other middleware.

`/healthz`: the process is alive (it needs no database slot, so it answers while every slot is
busy). `/readyz`: PostgreSQL and Redis answer and no migration is pending (it holds a database
slot for its checks). Both need no login and no allowed Host (a balancer probes by address), are
exempt from the HTTPS redirect, and say nothing beyond `ok` / `not ready`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from redis.exceptions import RedisError

from agentops.plumbing.postgres.base import LimitsMissing
from agentops.plumbing.slots import database_slot

logger = logging.getLogger(__name__)

_migrations_checked = False


def ready() -> bool:
    """True when the database and Redis answer and every migration is applied."""
    global _migrations_checked
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        if not _migrations_checked:
            from django.db.migrations.executor import MigrationExecutor

            executor = MigrationExecutor(connection)
            if executor.migration_plan(executor.loader.graph.leaf_nodes()):
                logger.warning("readyz: migrations are pending")
                return False
            _migrations_checked = True
        from agentops.plumbing import queues

        queues.redis_client().ping()
    except (DatabaseError, RedisError) as error:
        logger.warning("readyz: not ready: %s", error.__class__.__name__)
        return False
    except LimitsMissing as error:
        logger.error("readyz: not ready: %s", error)
        return False
    return True


class HealthCheckMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in ("GET", "HEAD"):
            head = request.method == "HEAD"
            if request.path == "/healthz":
                return _plain("ok", 200, head=head)
            if request.path == "/readyz":
                with database_slot():
                    if ready():
                        return _plain("ok", 200, head=head)
                    return _plain("not ready", 503, head=head)
        return self.get_response(request)


def _plain(text: str, status: int, *, head: bool) -> HttpResponse:
    """The answer, with no body to a HEAD request (gunicorn warns about, and drops, one)."""
    body = "" if head else f"{text}\n"
    response = HttpResponse(body, status=status, content_type="text/plain")
    response["Cache-Control"] = "no-store"
    return response
