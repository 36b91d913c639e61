"""A restore from the log may put a task's step and ledger rows back to the statuses its log
recorded, whatever their statuses now (`agentops.engine.transitions.rows_restore`).

The step and ledger triggers (0009, 0003) keep refusing every pair their tables do not allow,
except for the rows of the one task whose restore the current transaction declares with
`set_config('agentops.restoring', '<task id>', true)` (local to the transaction). Inserts still
start in the initial status. The pairs are written out again as in 0009 and 0003 (a migration
must not import app code); tests/agentops/test_transition_triggers.py compares the installed
functions with the tables.
"""

from django.db import migrations

STEP_PAIRS = (
    ("pending", "running"),
    ("pending", "skipped"),
    ("running", "pending"),
    ("running", "succeeded"),
    ("running", "failed"),
    ("running", "skipped"),
    ("failed", "pending"),
    ("failed", "running"),
    ("failed", "skipped"),
)
LEDGER_PAIRS = (
    ("pending", "succeeded"),
    ("pending", "failed"),
    ("pending", "executed_unknown"),
    ("executed_unknown", "succeeded"),
    ("executed_unknown", "failed"),
    ("succeeded", "compensated"),
)


def _function(
    table: str, noun: str, row: str, pairs: tuple[tuple[str, str], ...], *, restoring: bool
) -> str:
    allowed = ",\n            ".join(f"('{source}', '{target}')" for source, target in pairs)
    restore = (
        """
    IF current_setting('agentops.restoring', true) = NEW.task_id::text THEN
        RETURN NEW;
    END IF;"""
        if restoring
        else ""
    )
    return f"""
CREATE OR REPLACE FUNCTION {table}_check_transition() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status <> 'pending' THEN
            RAISE EXCEPTION 'a {row} must start pending, not %', NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status = OLD.status OR (OLD.status, NEW.status) IN (
            {allowed}
        ) THEN
        RETURN NEW;
    END IF;{restore}
    RAISE EXCEPTION 'illegal {noun} transition % -> % ({row} %)', OLD.status, NEW.status, OLD.id
        USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;
"""


STEP = ("agentops_step", "step", "step", STEP_PAIRS)
LEDGER = ("agentops_toolcall", "ledger", "tool call", LEDGER_PAIRS)


class Migration(migrations.Migration):
    dependencies = [("agentops", "0019_task_trace_context")]
    operations = [
        migrations.RunSQL(_function(*STEP, restoring=True), _function(*STEP, restoring=False)),
        migrations.RunSQL(_function(*LEDGER, restoring=True), _function(*LEDGER, restoring=False)),
    ]
