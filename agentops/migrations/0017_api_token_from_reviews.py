"""API tokens become the project's, not the people's room's: the model moves from `reviews` to
`agentops`, where every app's API router can authenticate with it.

No data is copied: the table is renamed (`reviews_apitoken` -> `agentops_apitoken`) with its id
sequence, constraints and indexes, whose names take the `agentops_apitoken_` prefix, so every
token people hold keeps working. The content type follows the model (its admin permissions with
it). The model state is created here and deleted from `reviews` by
`reviews.0012_api_token_to_agentops`, which also points `Decision.api_token` here.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

OLD, NEW = "reviews_apitoken", "agentops_apitoken"


def rename_sql(old: str, new: str) -> str:
    """Rename table `old` to `new`, its id sequence, and every constraint and index named
    `<old>_...` to `<new>_...` (as `0008_gate_and_audititem_from_reviews` does)."""
    return f"""
DO $$
DECLARE r record;
BEGIN
    ALTER TABLE {old} RENAME TO {new};
    ALTER SEQUENCE IF EXISTS {old}_id_seq RENAME TO {new}_id_seq;
    FOR r IN SELECT conname FROM pg_constraint
             WHERE conrelid = '{new}'::regclass AND conname LIKE '{old}\\_%' LOOP
        EXECUTE format('ALTER TABLE {new} RENAME CONSTRAINT %I TO %I',
                       r.conname, '{new}_' || substr(r.conname, {len(old) + 2}));
    END LOOP;
    FOR r IN SELECT indexname FROM pg_indexes
             WHERE tablename = '{new}' AND indexname LIKE '{old}\\_%' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I',
                       r.indexname, '{new}_' || substr(r.indexname, {len(old) + 2}));
    END LOOP;
END $$;
"""


def _move_content_type(apps, *, source: str, target: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=target, model="apitoken").exists():
        ContentType.objects.filter(app_label=source, model="apitoken").update(app_label=target)


def forwards(apps, schema_editor):
    _move_content_type(apps, source="reviews", target="agentops")


def backwards(apps, schema_editor):
    _move_content_type(apps, source="agentops", target="reviews")


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0016_record_guards"),
        ("reviews", "0011_decision_channel"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(rename_sql(OLD, NEW), rename_sql(NEW, OLD))],
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        ("prefix", models.CharField(max_length=12)),
                        ("key_hash", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_tokens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={"ordering": ["-created_at", "-id"]},
                ),
            ],
        ),
        migrations.RunPython(forwards, backwards),
    ]
