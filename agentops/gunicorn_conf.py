"""gunicorn settings for the web process (`gunicorn -c python:agentops.gunicorn_conf ...`).

gevent workers: each client is read in a greenlet of its own, so clients that send their
request slowly (a slow link, or on purpose) hold up no other request; a threaded worker gives
each such client a thread until its headers are complete, and a few dozen of them stall it.
The database stays bounded: a request takes one of `AGENTOPS_WEB_SLOTS` database slots per
process before it reaches Django's session and views (agentops.plumbing.slots), so one web process
opens at most that many connections to PostgreSQL and the whole web tier at most
`WEB_CONCURRENCY * AGENTOPS_WEB_SLOTS` (8 by default), whatever the number of clients.

Nothing of Django may be imported here (gunicorn's master reads this module before it forks the
workers, and gevent patches the standard library in each worker): Django's connection handler
must be made after that patch. The log formatter module (agentops.plumbing.logs) keeps to this too.
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlsplit

from gunicorn import glogging


def _whole(name: str, default: int) -> int:
    """A whole number from the environment, or one line naming the variable (as the settings)."""
    value = os.environ.get(name, "").strip() or str(default)
    if not value.isdigit():
        sys.exit(f"agentops: {name} must be a whole number of 0 or more, not {value!r}")
    return int(value)


if "GUNICORN_THREADS" in os.environ:
    sys.exit(
        "agentops: GUNICORN_THREADS is no longer read: the web runs gevent workers; set "
        "AGENTOPS_WEB_SLOTS (database connections per process) instead"
    )

bind = os.environ.get("GUNICORN_BIND", f"0.0.0.0:{_whole('PORT', 8000)}")
workers = _whole("WEB_CONCURRENCY", 2)
worker_class = "gevent"
# Clients one worker serves at once (a greenlet each); beyond this the kernel's listen queue
# holds them.
worker_connections = _whole("GUNICORN_WORKER_CONNECTIONS", 1000)
backlog = _whole("GUNICORN_BACKLOG", 2048)
timeout = _whole("GUNICORN_TIMEOUT", 30)
graceful_timeout = 20
keepalive = 5
max_requests = _whole("GUNICORN_MAX_REQUESTS", 5000)
# gunicorn's control socket (gunicornc) would be written under $HOME/.gunicorn: off, unless an
# operator names a path for it.
control_socket_disable = "GUNICORN_CONTROL_SOCKET" not in os.environ
if not control_socket_disable:
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]
max_requests_jitter = 500
# Access lines: key=value fields inside the structured line (see logconfig_dict below); the
# request id is the one the application returned (X-Request-ID), "-" when gunicorn answered alone.
accesslog = "-" if os.environ.get("GUNICORN_ACCESS_LOG", "1") == "1" else None
access_log_format = (
    "method=%(m)s path=%(U)s status=%(s)s bytes=%(B)s ms=%(M)s request_id=%({x-request-id}o)s"
)
logger_class = "agentops.gunicorn_conf.AccessLogger"
errorlog = "-"
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
# gunicorn's own lines (start-up, worker boots, access) in the application's structured format.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "structured": {
            "()": "agentops.plumbing.logs.StructuredFormatter",
            "style": os.environ.get("AGENTOPS_LOG_FORMAT", "kv"),
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
    "loggers": {
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}


class AccessLogger(glogging.Logger):
    """gunicorn's logger, with the real path on every access line.

    gunicorn fills PATH_INFO only for a request it hands to the application; for one it answers
    itself (an application that raised, a malformed request) the path comes from the raw URI.
    The path is quoted when it holds a space, a quote or an equals sign, like every kv value.
    """

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> Any:
        from agentops.plumbing.logs import (
            kv_value,  # in the worker (see agentops.plumbing.logs on imports)
        )

        atoms = super().atoms(resp, req, environ, request_time)
        path = environ.get("PATH_INFO")
        if path is None:
            path = urlsplit(environ.get("RAW_URI") or "").path or "-"
        atoms["U"] = kv_value(path)
        return atoms


def child_exit(server: Any, worker: Any) -> None:
    """In Prometheus multiprocess mode, let the collector forget a dead worker's live gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
