"""On PostgreSQL the decision log refuses UPDATE and DELETE: it is append-only."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION reviews_decision_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the decision log is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER reviews_decision_append_only
    BEFORE UPDATE OR DELETE ON reviews_decision
    FOR EACH ROW EXECUTE FUNCTION reviews_decision_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS reviews_decision_append_only ON reviews_decision;
DROP FUNCTION IF EXISTS reviews_decision_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("reviews", "0001_gates_audit_claims_decisions")]
    operations = [migrations.RunSQL(CREATE, DROP)]
