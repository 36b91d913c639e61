"""Gates and audit items are engine state now (`agentops.0008_gate_and_audititem_from_reviews`
renamed their tables): drop them from this app's model state, point `Notice.gate` at
`agentops.Gate`, and keep the permissions people hold.

Permissions: the content types `reviews.gate` / `reviews.audititem` become `agentops.*`, so the
model permissions (`view_gate`, ...) follow their model and the groups keep them; the two decision
rights (`decide_gate`, `review_audititem`) are the people's room's and move to `reviews.decision`,
so `reviews.decide_gate` keeps its name and its holders.
"""

import django.db.models.deletion
from django.db import migrations, models

MODELS = ("gate", "audititem")
RIGHTS = ("decide_gate", "review_audititem")
# Model permissions that now belong to agentops (the role lists of 0003 name them as reviews').
MOVED = {
    ("reviews", "view_gate"): ("agentops", "view_gate"),
    ("reviews", "view_audititem"): ("agentops", "view_audititem"),
}


def _move(apps, *, source: str, target: str, rights_to: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    for model in MODELS:
        if not ContentType.objects.filter(app_label=target, model=model).exists():
            ContentType.objects.filter(app_label=source, model=model).update(app_label=target)
    holder, _ = ContentType.objects.get_or_create(app_label="reviews", model=rights_to)
    Permission.objects.filter(codename__in=RIGHTS, content_type__model__in=MODELS).filter(
        content_type__app_label__in=(source, target)
    ).update(content_type=holder)


def forwards(apps, schema_editor):
    _move(apps, source="reviews", target="agentops", rights_to="decision")


def backwards(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    _move(apps, source="agentops", target="reviews", rights_to="decision")
    for codename, model in zip(RIGHTS, MODELS, strict=True):
        owner = ContentType.objects.filter(app_label="reviews", model=model).first()
        if owner is not None:
            Permission.objects.filter(
                codename=codename, content_type__app_label="reviews", content_type__model="decision"
            ).update(content_type=owner)


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0008_gate_and_audititem_from_reviews"),
        ("reviews", "0006_gate_approved_record_and_assignment"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="gate", name="decided_by"),
                migrations.RemoveField(model_name="gate", name="policy_version"),
                migrations.RemoveField(model_name="gate", name="step"),
                migrations.RemoveField(model_name="gate", name="task"),
                # The constraint still references the same table (renamed by agentops.0008).
                migrations.AlterField(
                    model_name="notice",
                    name="gate",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notices",
                        to="agentops.gate",
                    ),
                ),
                migrations.DeleteModel(name="AuditItem"),
                migrations.DeleteModel(name="Gate"),
            ],
            database_operations=[],
        ),
        migrations.AlterModelOptions(
            name="decision",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    (
                        "decide_gate",
                        "Can approve, edit or reject gates and resolve stopped tasks",
                    ),
                    ("review_audititem", "Can mark audit items ok or flag them"),
                ],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]
