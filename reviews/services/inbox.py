"""The inbox's change count: folding the rows of connections that have ended (models.InboxChanges).

Each connection counts in a row of its own, so rows accumulate as connections come and go (a web
request's connection, a worker's after a restart). The sweeper folds them into one row in one
statement: the sum, the inbox's version, is the same before and after."""

from __future__ import annotations

from django.db import connection

from reviews.models import InboxChanges

_FOLD = f"""
    WITH ended AS (
        DELETE FROM "{InboxChanges._meta.db_table}"
        WHERE "backend" <> %(folded)s AND "backend" NOT IN (SELECT "pid" FROM pg_stat_activity)
        RETURNING "changes"
    )
    INSERT INTO "{InboxChanges._meta.db_table}" ("backend", "changes")
    SELECT %(folded)s, sum("changes") FROM ended HAVING count(*) > 0
    ON CONFLICT ("backend") DO UPDATE
    SET "changes" = "{InboxChanges._meta.db_table}"."changes" + EXCLUDED."changes"
"""


def inbox_changes_fold() -> int:
    """Fold the counts of ended connections into the `FOLDED` row; a sweep hook (no job is
    enqueued, so it returns 0). A connection that starts meanwhile under a pid whose row is being
    folded waits for the fold and then counts in a new row: no change is lost."""
    with connection.cursor() as cursor:
        cursor.execute(_FOLD, {"folded": InboxChanges.FOLDED})
    return 0
