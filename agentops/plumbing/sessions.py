"""The session engine (`SESSION_ENGINE`): Django's database sessions, the same table and rows,
read with one statement of cached text instead of a query the ORM builds on every request (every
signed-in request reads its session, a poll that finds nothing new included)."""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.sessions.backends import db
from django.db import connections, router
from django.utils import timezone


class SessionStore(db.SessionStore):
    def load(self) -> dict[str, Any]:
        """The session's data, or {} when it does not exist or has expired (and then, as
        Django's own store does, no key: a new session gets a new one)."""
        with connections[router.db_for_read(self.model)].cursor() as cursor:
            cursor.execute(_load_sql(), [self.session_key, timezone.now()])
            row = cursor.fetchone()
        if row is None:
            self._session_key = None
            return {}
        return dict(self.decode(row[0]))


@functools.cache
def _load_sql() -> str:
    table = SessionStore.get_model_class()._meta.db_table
    return f'SELECT "session_data" FROM "{table}" WHERE "session_key" = %s AND "expire_date" > %s'
