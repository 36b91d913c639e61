"""On PostgreSQL nobody edits the record: the database refuses deleting a step, a ledger row, an
event, a snapshot, a gate or an audit item, updating an event or a snapshot, and changing a ledger
row's identity (task, step, tool, arguments, their digest, the idempotency key).

One path may delete: retention (`manage.py retention`), which archives finished tasks first and
deletes inside a transaction that says so with `SET LOCAL agentops.erasing = 'on'`. (A migration
must not import app code, so the rule is written out here; agentops/retention.py sets the flag.)
"""
from __future__ import annotations

from django.db import migrations

GUARDED_DELETES = ("agentops_step", "agentops_toolcall", "agentops_gate", "agentops_audititem")
APPEND_ONLY = ("agentops_event", "agentops_snapshot")
IDENTITY = ("task_id", "step_id", "tool", "args", "args_digest", "idempotency_key")

FUNCTIONS = """
CREATE OR REPLACE FUNCTION agentops_record_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('agentops.erasing', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is part of the record: % refused (only retention deletes, after archiving)',
        TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION agentops_toolcall_identity_fixed() RETURNS trigger AS $$
BEGIN
    IF ROW(NEW.task_id, NEW.step_id, NEW.tool, NEW.args, NEW.args_digest, NEW.idempotency_key)
       IS DISTINCT FROM
       ROW(OLD.task_id, OLD.step_id, OLD.tool, OLD.args, OLD.args_digest, OLD.idempotency_key) THEN
        RAISE EXCEPTION 'a ledger row''s identity is fixed (tool call %)', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
"""


def _trigger(table: str, events: str) -> str:
    return (
        f"CREATE TRIGGER {table}_record_guard BEFORE {events} ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION agentops_record_guard();"
    )


CREATE = "\n".join(
    [
        FUNCTIONS,
        *(_trigger(table, "DELETE") for table in GUARDED_DELETES),
        *(_trigger(table, "UPDATE OR DELETE") for table in APPEND_ONLY),
        "CREATE TRIGGER agentops_toolcall_identity_fixed "
        f"BEFORE UPDATE OF {', '.join(IDENTITY)} ON agentops_toolcall "
        "FOR EACH ROW EXECUTE FUNCTION agentops_toolcall_identity_fixed();",
    ]
)

DROP = "\n".join(
    [
        "DROP TRIGGER IF EXISTS agentops_toolcall_identity_fixed ON agentops_toolcall;",
        *(
            f"DROP TRIGGER IF EXISTS {table}_record_guard ON {table};"
            for table in (*GUARDED_DELETES, *APPEND_ONLY)
        ),
        "DROP FUNCTION IF EXISTS agentops_toolcall_identity_fixed();",
        "DROP FUNCTION IF EXISTS agentops_record_guard();",
    ]
)


class Migration(migrations.Migration):
    dependencies = [("agentops", "0015_toolcall_compensation_partial_index")]
    operations = [migrations.RunSQL(CREATE, DROP)]
