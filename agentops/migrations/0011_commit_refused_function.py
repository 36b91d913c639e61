"""A function a one-statement commit calls when a write it requires matched no row.

The engine sends each step commit as one data-modifying `WITH` statement; raising from inside it
rolls back every write of that statement (agentops/engine/transitions.py: `Commit`).
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION agentops_commit_refused(reason text) RETURNS integer AS $$
BEGIN
    RAISE EXCEPTION 'commit refused: %', reason USING ERRCODE = 'AOC01';
END
$$ LANGUAGE plpgsql;
"""

DROP = "DROP FUNCTION IF EXISTS agentops_commit_refused(text);"


class Migration(migrations.Migration):
    dependencies = [("agentops", "0010_page_indexes")]
    operations = [migrations.RunSQL(CREATE, DROP)]
