"""A read-only tool call may be recorded once, after it ran: the database lets a new ledger row
start `succeeded` when its side-effect class is `read`, and every other row still starts
`pending` (a side effect is recorded before it runs, DESIGN §6). The transitions are unchanged.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION agentops_toolcall_check_transition() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status = 'pending' OR (NEW.status = 'succeeded' AND NEW.side_effect = 'read') THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'a ledger row must start pending, not % (only a read starts succeeded)',
            NEW.status USING ERRCODE = 'check_violation';
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
"""

# Migration 0003's function, as it was.
REVERSE = """
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
"""


class Migration(migrations.Migration):
    dependencies = [("agentops", "0018_gate_approval_kind")]
    operations = [migrations.RunSQL(CREATE, REVERSE)]
