"""The "scope granters" group: its members may grant a stopped task (or its agent) the scope a
service refused, for a bounded time, and revoke grants (`agentops.grant_scopes`, granted by
membership in `agentops.permissions`; the group needs no permission rows)."""

from django.db import migrations

GROUP = "scope granters"


def create_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name=GROUP)


def drop_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0021_scope_grant"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]
    operations = [migrations.RunPython(create_group, drop_group)]
