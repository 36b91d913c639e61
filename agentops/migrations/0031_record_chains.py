"""Hash chains over the record: each task's events, snapshots and ledger rows (and, in the
reviews app, the decision log) carry a digest of their content and of the previous row's digest,
computed by the database as the rows are written, so every writer chains them and nothing else
can. agentops.engine.chains reads them back with the same functions.

- `agentops_chain_digest(previous, content)`: sha256 (hex) of the previous digest ('' for the
  first row) followed by the content's canonical text (jsonb's own output: keys ordered,
  whitespace fixed), so the database computes it the same way in every session.
- `<table>_content(row)`: what a row's digest covers, as a JSON array: every column the row was
  written with but its id (events, snapshots) and the chain's own columns; times in UTC.
- Events chain in `seq` order per task, snapshots in `seq` order per task, set on INSERT.
- A ledger row changes while its call is open, so it joins its task's chain when its result is
  fixed (it first becomes succeeded or failed): `chain_seq` is its place, `digest` covers its
  identity, result and error, not its status (succeeded becomes compensated later; the events
  record every status). After that, what the digest covers refuses UPDATE (identity and result
  by their own guards, 0016 and 0029, the rest here); the chain's columns
  are the database's alone (an UPDATE's value for them is ignored).
Rows written before this migration are chained here, in the same order.
"""

from __future__ import annotations

from django.db import migrations, models

FUNCTIONS = """
CREATE FUNCTION agentops_chain_digest(previous text, content jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT encode(
        sha256(convert_to(coalesce(previous, '') || content::text, 'UTF8')), 'hex') $$;

CREATE FUNCTION agentops_event_content(e agentops_event) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_array(e.task_id, e.seq, e.action, e.step_ordinal, e.payload, e.actor_id,
        e.actor_label, e.created_at AT TIME ZONE 'UTC') $$;

CREATE FUNCTION agentops_snapshot_content(s agentops_snapshot) RETURNS jsonb LANGUAGE sql STABLE
    AS $$ SELECT jsonb_build_array(s.task_id, s.seq, s.state, s.created_at AT TIME ZONE 'UTC') $$;

CREATE FUNCTION agentops_toolcall_content(c agentops_toolcall) RETURNS jsonb LANGUAGE sql STABLE
    AS $$ SELECT jsonb_build_array(c.id, c.task_id, c.step_id, c.tool, c.side_effect, c.args,
        c.args_digest, c.idempotency_key, c.compensation_of_id, c.result, c.error,
        c.created_at AT TIME ZONE 'UTC') $$;
"""

# Every row written before: chained in the order the triggers below chain new ones. The
# append-only guards refuse any UPDATE of events and snapshots, so they step aside meanwhile.
BACKFILL = """
ALTER TABLE agentops_event DISABLE TRIGGER agentops_event_record_guard;
ALTER TABLE agentops_snapshot DISABLE TRIGGER agentops_snapshot_record_guard;
DO $$
DECLARE
    r record;
    chain_task bigint;
    previous text;
    place integer;
BEGIN
    FOR r IN SELECT id, task_id FROM agentops_event ORDER BY task_id, seq LOOP
        IF r.task_id IS DISTINCT FROM chain_task THEN
            chain_task := r.task_id;
            previous := NULL;
        END IF;
        UPDATE agentops_event e
            SET digest = agentops_chain_digest(previous, agentops_event_content(e))
            WHERE e.id = r.id RETURNING e.digest INTO previous;
    END LOOP;
    chain_task := NULL;
    FOR r IN SELECT id, task_id FROM agentops_snapshot ORDER BY task_id, seq LOOP
        IF r.task_id IS DISTINCT FROM chain_task THEN
            chain_task := r.task_id;
            previous := NULL;
        END IF;
        UPDATE agentops_snapshot s
            SET digest = agentops_chain_digest(previous, agentops_snapshot_content(s))
            WHERE s.id = r.id RETURNING s.digest INTO previous;
    END LOOP;
    chain_task := NULL;
    FOR r IN SELECT id, task_id FROM agentops_toolcall
             WHERE status IN ('succeeded', 'failed', 'compensated') ORDER BY task_id, id LOOP
        IF r.task_id IS DISTINCT FROM chain_task THEN
            chain_task := r.task_id;
            previous := NULL;
            place := 0;
        END IF;
        place := place + 1;
        UPDATE agentops_toolcall c
            SET chain_seq = place,
                digest = agentops_chain_digest(previous, agentops_toolcall_content(c))
            WHERE c.id = r.id RETURNING c.digest INTO previous;
    END LOOP;
END
$$;
ALTER TABLE agentops_event ENABLE TRIGGER agentops_event_record_guard;
ALTER TABLE agentops_snapshot ENABLE TRIGGER agentops_snapshot_record_guard;
"""

TRIGGERS = """
CREATE FUNCTION agentops_event_chain() RETURNS trigger AS $$
BEGIN
    NEW.digest := agentops_chain_digest(
        (SELECT digest FROM agentops_event
         WHERE task_id = NEW.task_id AND seq < NEW.seq ORDER BY seq DESC LIMIT 1),
        agentops_event_content(NEW));
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER agentops_event_chain BEFORE INSERT ON agentops_event
    FOR EACH ROW EXECUTE FUNCTION agentops_event_chain();

CREATE FUNCTION agentops_snapshot_chain() RETURNS trigger AS $$
BEGIN
    NEW.digest := agentops_chain_digest(
        (SELECT digest FROM agentops_snapshot
         WHERE task_id = NEW.task_id AND seq < NEW.seq ORDER BY seq DESC LIMIT 1),
        agentops_snapshot_content(NEW));
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER agentops_snapshot_chain BEFORE INSERT ON agentops_snapshot
    FOR EACH ROW EXECUTE FUNCTION agentops_snapshot_chain();

CREATE FUNCTION agentops_toolcall_chain() RETURNS trigger AS $$
DECLARE
    last agentops_toolcall;
BEGIN
    -- The chain's columns are the database's own: whatever an UPDATE says of them (a model
    -- instance saved whole writes what it read), they keep what the chain set.
    IF TG_OP = 'UPDATE' AND OLD.chain_seq IS NOT NULL THEN
        NEW.chain_seq := OLD.chain_seq;
        NEW.digest := OLD.digest;
        -- Its identity and result have guards of their own (0016, 0029): the rest it covers.
        IF ROW(NEW.side_effect, NEW.compensation_of_id, NEW.error, NEW.created_at)
           IS DISTINCT FROM ROW(OLD.side_effect, OLD.compensation_of_id, OLD.error, OLD.created_at)
        THEN
            RAISE EXCEPTION 'ledger row % is chained: its side effect, compensated call, error and '
                'time are part of the record', OLD.id USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status NOT IN ('succeeded', 'failed', 'compensated') THEN
        NEW.chain_seq := NULL;
        NEW.digest := '';
        RETURN NEW;
    END IF;
    -- One place at a time in a task's chain (its lease holder is normally the only writer).
    PERFORM pg_advisory_xact_lock(hashtextextended('agentops_toolcall_chain', NEW.task_id));
    SELECT * INTO last FROM agentops_toolcall
        WHERE task_id = NEW.task_id AND chain_seq IS NOT NULL ORDER BY chain_seq DESC LIMIT 1;
    NEW.chain_seq := coalesce(last.chain_seq, 0) + 1;
    NEW.digest := agentops_chain_digest(last.digest, agentops_toolcall_content(NEW));
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER agentops_toolcall_chain BEFORE INSERT OR UPDATE ON agentops_toolcall
    FOR EACH ROW EXECUTE FUNCTION agentops_toolcall_chain();
"""

DROP = """
DROP TRIGGER IF EXISTS agentops_toolcall_chain ON agentops_toolcall;
DROP TRIGGER IF EXISTS agentops_snapshot_chain ON agentops_snapshot;
DROP TRIGGER IF EXISTS agentops_event_chain ON agentops_event;
DROP FUNCTION IF EXISTS agentops_toolcall_chain();
DROP FUNCTION IF EXISTS agentops_snapshot_chain();
DROP FUNCTION IF EXISTS agentops_event_chain();
DROP FUNCTION IF EXISTS agentops_toolcall_content(agentops_toolcall);
DROP FUNCTION IF EXISTS agentops_snapshot_content(agentops_snapshot);
DROP FUNCTION IF EXISTS agentops_event_content(agentops_event);
DROP FUNCTION IF EXISTS agentops_chain_digest(text, jsonb);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0030_archived_task"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="digest",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=64
            ),
        ),
        migrations.AddField(
            model_name="snapshot",
            name="digest",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=64
            ),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="chain_seq",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="digest",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=64
            ),
        ),
        migrations.AddConstraint(
            model_name="toolcall",
            constraint=models.UniqueConstraint(
                condition=models.Q(("chain_seq__isnull", False)),
                fields=("task", "chain_seq"),
                name="agentops_toolcall_chain_uniq",
            ),
        ),
        migrations.RunSQL(FUNCTIONS + BACKFILL + TRIGGERS, DROP),
    ]
