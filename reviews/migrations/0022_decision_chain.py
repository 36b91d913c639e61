"""The decision log is a hash chain, as the task's record is (agentops 0031, which defines
`agentops_chain_digest`): each row's digest covers its content and the previous row's digest,
set by the database on INSERT, with `chain_seq` its place. People decide from many sessions at
once, so a transaction-scoped advisory lock gives out the places one at a time (held until the
deciding transaction commits: decisions are people's, a few a second at most). Rows logged
before are chained here in id order.
"""

from __future__ import annotations

from django.conf import settings
from django.db import migrations, models

CREATE = """
CREATE FUNCTION reviews_decision_content(d reviews_decision) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_array(d.id, d.action, d.actor_id, d.actor_label, d.task_id_ref, d.subject,
        d.before_digest, d.after_digest, d.reason, d.policy_version_number, d.detail, d.channel,
        d.api_token_id, d.created_at AT TIME ZONE 'UTC') $$;

ALTER TABLE reviews_decision DISABLE TRIGGER reviews_decision_append_only;
DO $$
DECLARE
    r record;
    previous text;
    place bigint := 0;
BEGIN
    FOR r IN SELECT id FROM reviews_decision ORDER BY id LOOP
        place := place + 1;
        UPDATE reviews_decision d
            SET chain_seq = place,
                digest = agentops_chain_digest(previous, reviews_decision_content(d))
            WHERE d.id = r.id RETURNING d.digest INTO previous;
    END LOOP;
END
$$;
ALTER TABLE reviews_decision ENABLE TRIGGER reviews_decision_append_only;

CREATE FUNCTION reviews_decision_chain() RETURNS trigger AS $$
DECLARE
    last reviews_decision;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('reviews_decision_chain', 0));
    SELECT * INTO last FROM reviews_decision
        WHERE chain_seq IS NOT NULL ORDER BY chain_seq DESC LIMIT 1;
    NEW.chain_seq := coalesce(last.chain_seq, 0) + 1;
    NEW.digest := agentops_chain_digest(last.digest, reviews_decision_content(NEW));
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER reviews_decision_chain BEFORE INSERT ON reviews_decision
    FOR EACH ROW EXECUTE FUNCTION reviews_decision_chain();
"""

DROP = """
DROP TRIGGER IF EXISTS reviews_decision_chain ON reviews_decision;
DROP FUNCTION IF EXISTS reviews_decision_chain();
DROP FUNCTION IF EXISTS reviews_decision_content(reviews_decision);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0031_record_chains"),
        ("reviews", "0021_decision_no_truncate"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="decision",
            name="chain_seq",
            field=models.PositiveBigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="decision",
            name="digest",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=64
            ),
        ),
        migrations.AddConstraint(
            model_name="decision",
            constraint=models.UniqueConstraint(
                condition=models.Q(("chain_seq__isnull", False)),
                fields=("chain_seq",),
                name="reviews_decision_chain_uniq",
            ),
        ),
        migrations.RunSQL(CREATE, DROP),
    ]
