"""gunicorn settings for the web process (`gunicorn -c python:agentops.gunicorn_conf ...`).

Threaded workers with a fixed number of threads: each thread keeps at most one persistent
database connection, so one web process opens at most `GUNICORN_THREADS` connections to
PostgreSQL and the whole web tier at most `WEB_CONCURRENCY * GUNICORN_THREADS` (8 by default),
whatever the number of clients (idle keep-alive connections hold no thread).
"""

from __future__ import annotations

import os
from typing import Any

bind = os.environ.get("GUNICORN_BIND", f"0.0.0.0:{os.environ.get('PORT', '8000')}")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
# Connections waiting for a thread; beyond this the kernel's listen queue holds them.
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "1000"))
backlog = int(os.environ.get("GUNICORN_BACKLOG", "2048"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = 20
keepalive = 5
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "5000"))
max_requests_jitter = 500
# Access lines: key=value fields inside the structured line (see logconfig_dict below).
accesslog = "-" if os.environ.get("GUNICORN_ACCESS_LOG", "1") == "1" else None
access_log_format = 'method=%(m)s path="%(U)s" status=%(s)s bytes=%(B)s ms=%(M)s'
errorlog = "-"
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
# gunicorn's own lines (start-up, worker boots, access) in the application's structured format.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "structured": {
            "()": "agentops.logs.StructuredFormatter",
            "style": os.environ.get("AGENTOPS_LOG_FORMAT", "kv"),
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
    "loggers": {
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}


def child_exit(server: Any, worker: Any) -> None:
    """In Prometheus multiprocess mode, let the collector forget a dead worker's live gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
