"""`Step.policy_version` held a version number while `Task.policy_version` is the version itself:
the step's field is renamed `policy_version_number`, as on gates and audit items."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("agentops", "0012_drop_indexes_covered_by_unique")]

    operations = [
        migrations.RenameField(
            model_name="step", old_name="policy_version", new_name="policy_version_number"
        ),
    ]
