"""The decision log is never truncated (as it is never updated or deleted): the record's guard,
agentops_record_guard (agentops 0029), refuses TRUNCATE outside an erasing transaction."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0020_channel_names_registered"),
        ("agentops", "0029_final_rows_fixed"),
    ]
    operations = [
        migrations.RunSQL(
            "CREATE TRIGGER reviews_decision_no_truncate BEFORE TRUNCATE ON reviews_decision "
            "FOR EACH STATEMENT EXECUTE FUNCTION agentops_record_guard();",
            "DROP TRIGGER IF EXISTS reviews_decision_no_truncate ON reviews_decision;",
        )
    ]
