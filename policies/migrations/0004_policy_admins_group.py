"""Create the "policy admins" group with the permissions to edit and publish policies."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "policy admins"
CODENAMES = [
    "view_policy", "add_policy", "change_policy",
    "view_policyversion", "add_policyversion", "change_policyversion",
    "publish_policyversion",
    "view_policyrule", "add_policyrule", "change_policyrule", "delete_policyrule",
    "view_policychange",
]


def create_group(apps, schema_editor):
    # Permissions are normally created after all migrations; this group needs them now.
    config = apps.get_app_config("policies")
    config.models_module = True
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=GROUP)
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="policies", codename__in=CODENAMES)
    )


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0003_default_policy"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
