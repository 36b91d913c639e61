"""Django's PostgreSQL backend, with the project's connection limits checked on every connection
(`ENGINE = "agentops.plumbing.postgres"`; see `base.py`), and the check a process makes at start."""

from __future__ import annotations


def limits_checked_at_start() -> None:
    """Stop this process with the reason when a connection lacks its limits (a pooler without
    the role's defaults); a database that does not answer is left to the outage handling."""
    from django.db import OperationalError, connection

    from agentops.plumbing.postgres.base import LimitsMissing

    try:
        connection.ensure_connection()
    except OperationalError:
        return
    except LimitsMissing as error:
        raise SystemExit(str(error)) from None
