"""Gates and audit items become engine state: the models move from `reviews` to `agentops`.

No data is copied: the tables are renamed (`reviews_gate` -> `agentops_gate`, `reviews_audititem`
-> `agentops_audititem`) with their sequences, constraints and indexes, whose names take the
`agentops_<model>_` prefix. The model state is created here and deleted from `reviews` by
`reviews.0007_gate_and_audititem_to_agentops`.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (old table, new table, explicit names that do not share the table's prefix)
TABLES = [
    ("reviews_gate", "agentops_gate", {}),
    (
        "reviews_audititem",
        "agentops_audititem",
        {"reviews_audit_status_idx": "agentops_audititem_status_idx"},
    ),
]


def rename_sql(old: str, new: str, extra: dict[str, str]) -> str:
    """Rename table `old` to `new`, its id sequence, and every constraint and index named
    `<old>_...` to `<new>_...` (the `extra` ones first, so the loops leave them alone)."""
    renames = "\n".join(
        f"    ALTER INDEX {before} RENAME TO {after};" for before, after in extra.items()
    )
    return f"""
DO $$
DECLARE r record;
BEGIN
    ALTER TABLE {old} RENAME TO {new};
    ALTER SEQUENCE IF EXISTS {old}_id_seq RENAME TO {new}_id_seq;
{renames}
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


FORWARD = [rename_sql(old, new, extra) for old, new, extra in TABLES]
BACKWARD = [
    rename_sql(new, old, {after: before for before, after in extra.items()})
    for old, new, extra in TABLES
]


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0007_task_tokens_saved"),
        ("reviews", "0006_gate_approved_record_and_assignment"),
        ("policies", "0005_draft_discarded_status"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(forward, backward)
                for forward, backward in zip(FORWARD, BACKWARD, strict=True)
            ],
            state_operations=[
                migrations.CreateModel(
                    name="AuditItem",
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
                        ("agent", models.CharField(max_length=100)),
                        ("tool", models.CharField(max_length=100)),
                        ("route", models.CharField(max_length=16)),
                        ("sampled", models.BooleanField(default=False)),
                        ("rule", models.CharField(max_length=200)),
                        ("policy_version_number", models.PositiveIntegerField(null=True)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("pending", "To review"),
                                    ("ok", "OK"),
                                    ("flagged", "Flagged"),
                                ],
                                default="pending",
                                max_length=16,
                            ),
                        ),
                        ("note", models.TextField(blank=True)),
                        ("reviewed_at", models.DateTimeField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "reviewed_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "step",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="agentops.step",
                            ),
                        ),
                        (
                            "task",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="audit_items",
                                to="agentops.task",
                            ),
                        ),
                        (
                            "tool_call",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="audit_item",
                                to="agentops.toolcall",
                            ),
                        ),
                    ],
                    options={
                        "ordering": ["-created_at", "-id"],
                        "indexes": [
                            models.Index(
                                fields=["status", "created_at"],
                                name="agentops_audititem_status_idx",
                            )
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("status__in", ["pending", "ok", "flagged"])),
                                name="agentops_audititem_status_valid",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Gate",
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
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("open", "Open"),
                                    ("approved", "Approved"),
                                    ("rejected", "Rejected"),
                                    ("expired", "Expired"),
                                ],
                                default="open",
                                max_length=16,
                            ),
                        ),
                        ("tool", models.CharField(max_length=100)),
                        ("side_effect", models.CharField(blank=True, max_length=32)),
                        ("arguments", models.JSONField()),
                        ("args_digest", models.CharField(max_length=64)),
                        ("edited", models.BooleanField(default=False)),
                        (
                            "amount",
                            models.DecimalField(
                                blank=True, decimal_places=2, max_digits=14, null=True
                            ),
                        ),
                        ("confidence", models.FloatField(blank=True, null=True)),
                        ("policy_version_number", models.PositiveIntegerField(null=True)),
                        ("rule", models.CharField(max_length=200)),
                        ("reasons", models.JSONField(default=list)),
                        ("approver_group", models.CharField(default="operators", max_length=150)),
                        ("timeout_action", models.CharField(default="reject", max_length=16)),
                        ("escalate_to", models.CharField(blank=True, max_length=150)),
                        ("due_at", models.DateTimeField()),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("decided_at", models.DateTimeField(blank=True, null=True)),
                        ("feedback", models.TextField(blank=True)),
                        ("approved_arguments", models.JSONField(blank=True, null=True)),
                        ("approved_digest", models.CharField(blank=True, max_length=64)),
                        ("stopped_with", models.CharField(blank=True, max_length=16)),
                        (
                            "decided_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "policy_version",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="policies.policyversion",
                            ),
                        ),
                        (
                            "step",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="gates",
                                to="agentops.step",
                            ),
                        ),
                        (
                            "task",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="gates",
                                to="agentops.task",
                            ),
                        ),
                    ],
                    options={
                        "ordering": ["due_at", "id"],
                        "indexes": [
                            models.Index(
                                fields=["status", "due_at"], name="agentops_gate_open_due_idx"
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("status", "open")),
                                fields=("step",),
                                name="agentops_gate_one_open_per_step",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("status__in", ["open", "approved", "rejected", "expired"])
                                ),
                                name="agentops_gate_status_valid",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
