"""On PostgreSQL, the database itself refuses an illegal task or step transition, as it does for
the ledger (0003).

A status change must be one of the (source, target) pairs below; an UPDATE that leaves the status
as it is passes. New tasks start queued, new steps pending. The pairs are the transition tables of
agentops/states.py as of this migration (a migration must not import app code, so they are written
out here); tests/agentops/test_transition_triggers.py compares them with the tables, so a change
to a table needs a new migration replacing these functions.
"""

from django.db import migrations

TASK_INITIAL = "queued"
TASK_PAIRS = (
    ("queued", "running"),
    ("queued", "paused"),
    ("queued", "aborted"),
    ("running", "queued"),
    ("running", "awaiting_approval"),
    ("running", "retry_scheduled"),
    ("running", "needs_attention"),
    ("running", "paused"),
    ("running", "awaiting_children"),
    ("running", "succeeded"),
    ("running", "aborted"),
    ("running", "rolled_back"),
    ("awaiting_approval", "queued"),
    ("awaiting_approval", "needs_attention"),
    ("awaiting_approval", "paused"),
    ("awaiting_approval", "aborted"),
    ("retry_scheduled", "queued"),
    ("retry_scheduled", "running"),
    ("retry_scheduled", "paused"),
    ("retry_scheduled", "aborted"),
    ("needs_attention", "queued"),
    ("needs_attention", "aborted"),
    ("paused", "queued"),
    ("paused", "aborted"),
    ("awaiting_children", "queued"),
    ("awaiting_children", "paused"),
    ("awaiting_children", "aborted"),
)

STEP_INITIAL = "pending"
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


def _create(table: str, noun: str, initial: str, pairs: tuple[tuple[str, str], ...]) -> str:
    allowed = ",\n            ".join(f"('{source}', '{target}')" for source, target in pairs)
    return f"""
CREATE OR REPLACE FUNCTION {table}_check_transition() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status <> '{initial}' THEN
            RAISE EXCEPTION 'a {noun} must start {initial}, not %', NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (OLD.status, NEW.status) IN (
            {allowed}
        ) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'illegal {noun} transition % -> % ({noun} %)', OLD.status, NEW.status, OLD.id
        USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER {table}_insert
    BEFORE INSERT ON {table}
    FOR EACH ROW EXECUTE FUNCTION {table}_check_transition();

CREATE TRIGGER {table}_transition
    BEFORE UPDATE OF status ON {table}
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {table}_check_transition();
"""


def _drop(table: str) -> str:
    return f"""
DROP TRIGGER IF EXISTS {table}_transition ON {table};
DROP TRIGGER IF EXISTS {table}_insert ON {table};
DROP FUNCTION IF EXISTS {table}_check_transition();
"""


class Migration(migrations.Migration):
    dependencies = [("agentops", "0008_gate_and_audititem_from_reviews")]
    operations = [
        migrations.RunSQL(
            _create("agentops_task", "task", TASK_INITIAL, TASK_PAIRS), _drop("agentops_task")
        ),
        migrations.RunSQL(
            _create("agentops_step", "step", STEP_INITIAL, STEP_PAIRS), _drop("agentops_step")
        ),
    ]
