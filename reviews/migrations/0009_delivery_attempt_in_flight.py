"""A delivery records the attempt in flight: `attempt_started_at` is set when an attempt is
claimed and counted (committed before anything is sent) and cleared when its outcome is
recorded; only a pending delivery can have one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0008_task_starters_group"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="attempt_started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.CheckConstraint(
                condition=models.Q(("status", "pending"), ("attempt_started_at__isnull", True), _connector="OR"),
                name="reviews_delivery_settled_not_in_flight",
            ),
        ),
    ]
