"""The fleet's stop button: a stop of every task, an agent's or a tool's, in force until lifted
(`agentops.engine.stops`), at most one in force per scope and target, and its permission
`agentops.stop_fleet`."""

from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0031_record_chains"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="FleetStop",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "scope",
                    models.CharField(
                        choices=[
                            ("all", "Every task"),
                            ("agent", "Every task of an agent"),
                            ("tool", "Every call of a tool"),
                        ],
                        max_length=16,
                    ),
                ),
                ("target", models.CharField(blank=True, default="", max_length=100)),
                ("reason", models.TextField()),
                ("stopped_by_label", models.CharField(max_length=150)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("paused_at_stop", models.PositiveIntegerField(default=0)),
                ("lifted_at", models.DateTimeField(blank=True, null=True)),
                ("lifted_by_label", models.CharField(blank=True, default="", max_length=150)),
                ("lift_reason", models.TextField(blank=True, default="")),
                (
                    "lifted_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "stopped_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    (
                        "stop_fleet",
                        "Stop and resume every task of an agent, of a tool, or all of them",
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("lifted_at__isnull", True)),
                        fields=("scope", "target"),
                        name="agentops_fleetstop_one_in_force",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("scope", "all"), ("target", "")),
                            models.Q(
                                ("scope__in", ["agent", "tool"]),
                                models.Q(("target", ""), _negated=True),
                            ),
                            _connector="OR",
                        ),
                        name="agentops_fleetstop_target_fits_scope",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("reason", ""), _negated=True),
                        name="agentops_fleetstop_reason_given",
                    ),
                ],
            },
        ),
    ]
