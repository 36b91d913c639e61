"""The inbox's changes, counted by the database: a trigger on every table whose rows the inbox
shows adds one to its connection's row of `reviews_inboxchanges` in the transaction that changes
what it shows, so a poll reads the sum of a few rows instead of digesting every open gate and
stopped task.

What the inbox shows (reviews.selectors.inbox): open gates with their tasks, tasks that need
attention, who holds each (claims), whether a stopped task has a call of unknown outcome, and the
active operators an item can be assigned to. A gate is open exactly while its task is
`awaiting_approval`, so a task counts when it enters, leaves or changes in one of the two waiting
statuses; a running task's step commits never count. (A migration must not import app code, so
the statuses are written out here; `tests/reviews/test_inbox_changes.py` holds them against
agentops.states.)
"""

from __future__ import annotations

from django.db import migrations, models

WAITING = "('awaiting_approval', 'needs_attention')"

FUNCTION = f"""
CREATE OR REPLACE FUNCTION reviews_inbox_changed() RETURNS trigger AS $$
BEGIN
    INSERT INTO reviews_inboxchanges (backend, changes) VALUES (pg_backend_pid(), 1)
    ON CONFLICT (backend) DO UPDATE SET changes = reviews_inboxchanges.changes + 1;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
"""

# (table, event, condition or None for every row): the inbox changes when one of these rows does.
COUNTED = [
    ("agentops_gate", "INSERT", "NEW.status = 'open'"),
    ("agentops_gate", "UPDATE", "OLD.status = 'open' OR NEW.status = 'open'"),
    ("agentops_gate", "DELETE", "OLD.status = 'open'"),
    ("agentops_task", "INSERT", f"NEW.status IN {WAITING}"),
    ("agentops_task", "UPDATE", f"OLD.status IN {WAITING} OR NEW.status IN {WAITING}"),
    ("agentops_task", "DELETE", f"OLD.status IN {WAITING}"),
    ("agentops_toolcall", "INSERT", "NEW.status = 'executed_unknown'"),
    (
        "agentops_toolcall",
        "UPDATE",
        "OLD.status IS DISTINCT FROM NEW.status "
        "AND 'executed_unknown' IN (OLD.status, NEW.status)",
    ),
    ("agentops_toolcall", "DELETE", "OLD.status = 'executed_unknown'"),
    ("reviews_claim", "INSERT OR UPDATE OR DELETE", None),
    (
        "auth_user",
        "UPDATE",
        "OLD.username IS DISTINCT FROM NEW.username OR OLD.is_active IS DISTINCT FROM NEW.is_active",
    ),
    ("auth_user", "DELETE", None),
    ("auth_user_groups", "INSERT OR UPDATE OR DELETE", None),
    ("auth_group", "UPDATE", "OLD.name IS DISTINCT FROM NEW.name"),
    ("auth_group", "DELETE", None),
]


def _name(table: str, event: str) -> str:
    return f"{table}_inbox_{event.split()[0].lower() if ' OR ' not in event else 'any'}"


def _trigger(table: str, event: str, condition: str | None) -> str:
    when = f"WHEN ({condition}) " if condition else ""
    return (
        f"CREATE TRIGGER {_name(table, event)} AFTER {event} ON {table} "
        f"FOR EACH ROW {when}EXECUTE FUNCTION reviews_inbox_changed();"
    )


CREATE = "\n".join([FUNCTION, *(_trigger(*counted) for counted in COUNTED)])
DROP = "\n".join(
    [
        *(f"DROP TRIGGER IF EXISTS {_name(t, e)} ON {t};" for t, e, _ in COUNTED),
        "DROP FUNCTION IF EXISTS reviews_inbox_changed();",
    ]
)


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0018_slack_links_confirmed"),
        ("agentops", "0026_read_call_recorded_after"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.CreateModel(
            name="InboxChanges",
            fields=[
                ("backend", models.IntegerField(primary_key=True, serialize=False)),
                ("changes", models.BigIntegerField()),
            ],
        ),
        migrations.RunSQL(CREATE, DROP),
    ]
