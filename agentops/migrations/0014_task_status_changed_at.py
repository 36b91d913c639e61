"""`Task.status_changed_at`: when the task entered its status. The stopped tasks' index orders by
it instead of `updated_at`, which every commit sets: with no index on `updated_at`, a commit that
changes no status updates the task row in place (HOT), writing no index entries."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0013_step_policy_version_number"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="status_changed_at",
            field=models.DateTimeField(auto_now_add=True, default=django.utils.timezone.now),
            preserve_default=False,
        ),
        # Until now the last write stood for it (a stopped task is not written while it waits).
        migrations.RunSQL(
            'UPDATE "agentops_task" SET "status_changed_at" = "updated_at"',
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.RemoveIndex(model_name="task", name="agentops_task_stopped_idx"),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("status", "needs_attention")),
                fields=["status_changed_at", "id"],
                name="agentops_task_stopped_idx",
            ),
        ),
    ]
