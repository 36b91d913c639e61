"""Django's PostgreSQL backend, refusing a connection that lacks the project's limits.

Every connection must carry three server-side limits that keep one frozen process from blocking
the others: a transaction left idle is cut off, a lock is never waited on for long, and no
statement runs away. Connected directly (or through a pooler in session mode) each connection
asks for them as startup options. A pooler in transaction mode (PgBouncer) hands each transaction
to any of its server connections and cannot pass startup options on (1.18 refuses the `options`
parameter; later versions refuse these three): there the limits must be defaults of the role, set
once with `manage.py dblimits --apply` (or by the pooler's `connect_query`).

Either way, each new connection reads the limits in force before Django uses it: one that lacks
them is closed and refused with an error naming the fix, so no process works without them.

The database refuses TRUNCATE on the tables of the record (agentops migration 0029) unless the
transaction says it erases. Django's flush of a test database (what a transactional test does
after itself) says so; `manage.py flush` of any other database is refused.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.creation import TEST_DATABASE_PREFIX
from django.db.backends.postgresql import base, operations

# The limits in force that differ from those wanted: both durations (`3s`, `1min`, `500ms`, `0`),
# compared as the server reads them.
LIMITS_SQL = (
    "SELECT wanted.name, current_setting(wanted.name), wanted.value "
    "FROM unnest(%s::text[], %s::text[]) AS wanted(name, value) "
    "WHERE current_setting(wanted.name)::interval IS DISTINCT FROM wanted.value::interval"
)
FIX = (
    "through a pooler in transaction mode (AGENTOPS_DB_POOL_MODE=transaction) the limits are "
    "the role's defaults: run `manage.py dblimits --apply` once, then let the pooler open new "
    "server connections (PgBouncer: RECONNECT, or a restart); see docs/scaling.md"
)


class LimitsMissing(ImproperlyConfigured):
    """A new connection lacks one of the limits every connection must carry."""


def limits_missing(raw: Any, limits: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, value in force, value wanted) for each limit `raw` (a psycopg connection) lacks."""
    names, values = list(limits), list(limits.values())
    with raw.cursor() as cursor:
        cursor.execute(LIMITS_SQL, [names, values], prepare=False)
        missing: list[tuple[str, str, str]] = cursor.fetchall()
    if not raw.autocommit:
        raw.rollback()  # the check's read leaves no transaction open behind it
    return missing


def refusal(missing: list[tuple[str, str, str]]) -> LimitsMissing:
    found = ", ".join(f"{name} is {value} (wanted {wanted})" for name, value, wanted in missing)
    return LimitsMissing(f"agentops: the database connection lacks its limits: {found}; {FIX}")


def connect_error(error: psycopg.OperationalError, params: dict[str, Any]) -> Exception:
    """The error a failed connect raises: a pooler's refusal of the startup options (PgBouncer:
    "unsupported startup parameter"; its words are looked for only to add what to set) names
    the setting it needs."""
    if "options" in params and "startup parameter" in str(error):
        return psycopg.OperationalError(
            f"{error}; behind a pooler in transaction mode set "
            "AGENTOPS_DB_POOL_MODE=transaction (docs/scaling.md)"
        )
    return error


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(
        self,
        style: Any,
        tables: Any,
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        statements: list[str] = super().sql_flush(
            style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )
        if statements and self.connection.settings_dict["NAME"].startswith(TEST_DATABASE_PREFIX):
            # Run in one transaction (Django's execute_sql_flush): the record's guard lets it be.
            return ["SET LOCAL agentops.erasing = 'on'", *statements]
        return statements


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        try:
            raw = super().get_new_connection(conn_params)
        except psycopg.OperationalError as error:
            raise connect_error(error, conn_params) from error
        missing = limits_missing(raw, self.settings_dict.get("LIMITS", {}))
        if missing:
            raw.close()
            raise refusal(missing)
        return raw
