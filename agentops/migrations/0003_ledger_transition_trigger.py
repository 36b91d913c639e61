"""On PostgreSQL, the database itself refuses an illegal ledger transition.

Legal: pending -> succeeded | failed | executed_unknown; executed_unknown -> succeeded | failed;
succeeded -> compensated. New rows start pending. (The same table is in agentops/states.py; a
migration must not import app code, so it is written out here.)
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION agentops_toolcall_check_transition() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status <> 'pending' THEN
            RAISE EXCEPTION 'a ledger row must start pending, not %', NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status = OLD.status
       OR (OLD.status = 'pending' AND NEW.status IN ('succeeded', 'failed', 'executed_unknown'))
       OR (OLD.status = 'executed_unknown' AND NEW.status IN ('succeeded', 'failed'))
       OR (OLD.status = 'succeeded' AND NEW.status = 'compensated') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'illegal ledger transition % -> % (tool call %)', OLD.status, NEW.status, OLD.id
        USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER agentops_toolcall_transition
    BEFORE INSERT OR UPDATE OF status ON agentops_toolcall
    FOR EACH ROW EXECUTE FUNCTION agentops_toolcall_check_transition();
"""

DROP = """
DROP TRIGGER IF EXISTS agentops_toolcall_transition ON agentops_toolcall;
DROP FUNCTION IF EXISTS agentops_toolcall_check_transition();
"""


class Migration(migrations.Migration):
    dependencies = [("agentops", "0002_task_mode_and_compensation_rows")]
    operations = [migrations.RunSQL(CREATE, DROP)]
