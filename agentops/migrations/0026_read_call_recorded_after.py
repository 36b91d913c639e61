"""A read-only tool call may be recorded once, after it ran: the database lets a new ledger row
start `succeeded` when its side-effect class is `read`, and every other row still starts
`pending` (a side effect is recorded before it runs, DESIGN §6). The transitions are unchanged,
and so is the escape of a restore from the log (0020): the rows of the one task whose restore
the transaction declares may take any status.
"""

from __future__ import annotations

import importlib

from django.db import migrations

# The pairs and the function as 0020 installed them (a migration imports no app code).
RESTORE = importlib.import_module("agentops.migrations.0020_restore_from_log")
ALLOWED = ",\n            ".join(
    f"('{source}', '{target}')" for source, target in RESTORE.LEDGER_PAIRS
)

CREATE = f"""
CREATE OR REPLACE FUNCTION agentops_toolcall_check_transition() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status = 'pending' OR (NEW.status = 'succeeded' AND NEW.side_effect = 'read') THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'a tool call must start pending, not % (only a read starts succeeded)',
            NEW.status USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.status = OLD.status OR (OLD.status, NEW.status) IN (
            {ALLOWED}
        ) THEN
        RETURN NEW;
    END IF;
    IF current_setting('agentops.restoring', true) = NEW.task_id::text THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'illegal ledger transition % -> % (tool call %)', OLD.status, NEW.status, OLD.id
        USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;
"""

REVERSE = RESTORE._function(*RESTORE.LEDGER, restoring=True)


class Migration(migrations.Migration):
    dependencies = [("agentops", "0025_task_origin")]
    operations = [migrations.RunSQL(CREATE, REVERSE)]
