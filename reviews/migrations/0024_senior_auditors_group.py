"""The "senior auditors" group: its members settle the audit items whose reviewers disagree (the
adjudication lane; `reviews.adjudicate_audit`, granted by membership in `reviews.roles`; the
group needs no permission rows)."""

from __future__ import annotations

from django.db import migrations

GROUP = "senior auditors"


def create_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name=GROUP)


def drop_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0023_rubrics"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]
    operations = [migrations.RunPython(create_group, drop_group)]
