"""The groups people act in, with their permissions ("policy admins" comes from `policies`).

Operators decide gates and interventions; auditors review the audit queue and read everything.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUPS = {
    "operators": [
        ("reviews", "decide_gate"),
        ("reviews", "view_gate"),
        ("reviews", "view_audititem"),
        ("reviews", "view_decision"),
        ("agentops", "view_task"),
    ],
    "auditors": [
        ("reviews", "review_audititem"),
        ("reviews", "view_audititem"),
        ("reviews", "view_gate"),
        ("reviews", "view_decision"),
        ("agentops", "view_task"),
    ],
}


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations; these groups need them now.
    for label in ("agentops", "reviews"):
        config = apps.get_app_config(label)
        config.models_module = True
        create_permissions(config, apps=apps, verbosity=0)
        config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, perms in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for app_label, codename in perms:
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )


def drop_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(GROUPS)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0002_decision_log_append_only"),
        ("agentops", "0004_policy_pin_and_step_approval"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_groups, drop_groups)]
