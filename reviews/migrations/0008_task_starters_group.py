"""The "task starters" group: its members may start tasks (`agentops.start_task`, granted by
membership in `reviews.roles`; the group needs no permission rows)."""

from django.db import migrations

GROUP = "task starters"


def create_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name=GROUP)


def drop_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0007_gate_and_audititem_to_agentops"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]
    operations = [migrations.RunPython(create_group, drop_group)]
