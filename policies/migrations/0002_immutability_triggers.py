"""PostgreSQL triggers: a published policy version and its rules are immutable; the change log
is append-only."""

from django.db import migrations

INSTALL = [
    """
    CREATE OR REPLACE FUNCTION policies_version_immutable() RETURNS trigger AS $$
    BEGIN
        IF OLD.status = 'published' THEN
            RAISE EXCEPTION 'policies: published policy version % is immutable (% refused)',
                OLD.id, TG_OP USING ERRCODE = 'restrict_violation';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER policies_policyversion_immutable
    BEFORE UPDATE OR DELETE ON policies_policyversion
    FOR EACH ROW EXECUTE FUNCTION policies_version_immutable()
    """,
    """
    CREATE OR REPLACE FUNCTION policies_rule_immutable() RETURNS trigger AS $$
    DECLARE
        version_status text;
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            SELECT status INTO version_status FROM policies_policyversion WHERE id = OLD.version_id;
            IF version_status = 'published' THEN
                RAISE EXCEPTION 'policies: rule % belongs to a published version (% refused)',
                    OLD.id, TG_OP USING ERRCODE = 'restrict_violation';
            END IF;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            SELECT status INTO version_status FROM policies_policyversion WHERE id = NEW.version_id;
            IF version_status = 'published' THEN
                RAISE EXCEPTION 'policies: cannot add a rule to published version % (% refused)',
                    NEW.version_id, TG_OP USING ERRCODE = 'restrict_violation';
            END IF;
            RETURN NEW;
        END IF;
        RETURN OLD;
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER policies_policyrule_immutable
    BEFORE INSERT OR UPDATE OR DELETE ON policies_policyrule
    FOR EACH ROW EXECUTE FUNCTION policies_rule_immutable()
    """,
    """
    CREATE OR REPLACE FUNCTION policies_change_append_only() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION 'policies: the policy change log is append-only (% refused)', TG_OP
            USING ERRCODE = 'restrict_violation';
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER policies_policychange_append_only
    BEFORE UPDATE OR DELETE ON policies_policychange
    FOR EACH ROW EXECUTE FUNCTION policies_change_append_only()
    """,
]

UNINSTALL = [
    "DROP TRIGGER IF EXISTS policies_policychange_append_only ON policies_policychange",
    "DROP FUNCTION IF EXISTS policies_change_append_only()",
    "DROP TRIGGER IF EXISTS policies_policyrule_immutable ON policies_policyrule",
    "DROP FUNCTION IF EXISTS policies_rule_immutable()",
    "DROP TRIGGER IF EXISTS policies_policyversion_immutable ON policies_policyversion",
    "DROP FUNCTION IF EXISTS policies_version_immutable()",
]


class Migration(migrations.Migration):
    dependencies = [("policies", "0001_policies")]

    operations = [migrations.RunSQL(INSTALL, UNINSTALL)]
