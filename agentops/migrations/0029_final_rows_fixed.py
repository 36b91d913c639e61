"""Nothing rewrites the record unseen: what a finished row says is fixed, and no table of the
record is truncated.

Once final, the database refuses changing a step's output and model reply (succeeded or
skipped), a gate's decision (its status, decider, time, arguments, what was approved, the feedback,
the approvals; once it is no longer open), a ledger row's result (succeeded, failed or
compensated) and a task's goal and input (succeeded, aborted or rolled back). A change that
writes the same value again is no change and passes.

TRUNCATE is refused on every table of the record, as DELETE already is: only a transaction that
says `SET LOCAL agentops.erasing = 'on'` removes rows (retention, after archiving; and the test
suite's flush of a test database, agentops.plumbing.postgres). The decision log's own trigger is
in the reviews app's migrations.
"""

from __future__ import annotations

from django.db import migrations

# Every table of the record: TRUNCATE on any of them (or cascading to it) is refused.
RECORD_TABLES = (
    "agentops_task",
    "agentops_step",
    "agentops_toolcall",
    "agentops_event",
    "agentops_snapshot",
    "agentops_gate",
    "agentops_audititem",
    "agentops_artifact",
    "agentops_storedfile",
)

# table: (the condition on OLD that makes the row final, the columns then fixed)
FINAL_FIELDS = {
    "agentops_step": ("OLD.status IN ('succeeded', 'skipped')", ("output", "model_response")),
    "agentops_gate": (
        "OLD.status <> 'open'",
        (
            "status",
            "decided_by_id",
            "decided_at",
            "arguments",
            "args_digest",
            "approved_arguments",
            "approved_digest",
            "feedback",
            "stopped_with",
            "approvals",
        ),
    ),
    "agentops_toolcall": ("OLD.status IN ('succeeded', 'failed', 'compensated')", ("result",)),
    "agentops_task": ("OLD.status IN ('succeeded', 'aborted', 'rolled_back')", ("goal", "input")),
}


def _record_guard(erasing: str) -> str:
    """agentops_record_guard, letting the operations `erasing` (SQL list) pass in a transaction
    that erases: DELETE and TRUNCATE from this migration on, DELETE alone before it (0016)."""
    return f"""
CREATE OR REPLACE FUNCTION agentops_record_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP IN ({erasing}) AND current_setting('agentops.erasing', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is part of the record: % refused (only retention deletes, after archiving)',
        TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;
"""


def _final_fixed(table: str, final: str, columns: tuple[str, ...]) -> str:
    new = ", ".join(f"NEW.{column}" for column in columns)
    old = ", ".join(f"OLD.{column}" for column in columns)
    return f"""
CREATE OR REPLACE FUNCTION {table}_final_fixed() RETURNS trigger AS $$
BEGIN
    IF {final} AND ROW({new}) IS DISTINCT FROM ROW({old}) THEN
        RAISE EXCEPTION '% % is final: its % are part of the record',
            TG_TABLE_NAME, OLD.id, '{", ".join(columns)}'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER {table}_final_fixed BEFORE UPDATE OF {", ".join(columns)} ON {table}
    FOR EACH ROW EXECUTE FUNCTION {table}_final_fixed();
"""


CREATE = "\n".join(
    [
        _record_guard("'DELETE', 'TRUNCATE'"),
        *(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION agentops_record_guard();"
            for table in RECORD_TABLES
        ),
        *(_final_fixed(table, *rule) for table, rule in FINAL_FIELDS.items()),
    ]
)

DROP = "\n".join(
    [
        *(f"DROP TRIGGER IF EXISTS {table}_final_fixed ON {table};" for table in FINAL_FIELDS),
        *(f"DROP FUNCTION IF EXISTS {table}_final_fixed();" for table in FINAL_FIELDS),
        *(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};" for table in RECORD_TABLES),
        _record_guard("'DELETE'"),
    ]
)


class Migration(migrations.Migration):
    dependencies = [("agentops", "0028_stored_file")]
    operations = [migrations.RunSQL(CREATE, DROP)]
