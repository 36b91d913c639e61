"""Install the shipped default policy as its published version 1.

The rules are written inline (a migration never imports app code); `policies.defaults` holds the
same list for reinstalling, and a test checks the two agree.
"""

from django.db import migrations
from django.utils import timezone

GATE = {"approver_group": "operators", "timeout_seconds": 3600, "timeout_action": "reject"}

RULES = [
    {"name": "unknown tool", "route": "gate", "unknown_tool": True, **GATE},
    {"name": "low confidence", "route": "gate", "confidence_below": 0.7, **GATE},
    {"name": "sensitive system", "route": "gate", "touches_sensitive": True, **GATE},
    {"name": "large payment", "route": "gate", "side_effects": ["financial"],
     "amount_above": 100.0, **GATE},
    {"name": "small payment", "route": "audit", "side_effects": ["financial"],
     "sample_rate": 1.0},
    {"name": "notification", "route": "audit", "side_effects": ["notify"], "sample_rate": 1.0},
    {"name": "read", "route": "auto", "side_effects": ["read"], "sample_rate": 0.05},
    {"name": "default", "route": "gate", "is_default": True, **GATE},
]


def install(apps, schema_editor):
    Policy = apps.get_model("policies", "Policy")
    PolicyVersion = apps.get_model("policies", "PolicyVersion")
    PolicyRule = apps.get_model("policies", "PolicyRule")
    PolicyChange = apps.get_model("policies", "PolicyChange")
    if Policy.objects.filter(name="default").exists():
        return
    policy = Policy.objects.create(
        name="default",
        description=(
            "Shipped oversight policy: unknown tools, low confidence, sensitive systems and "
            "large payments wait for an operator; small payments and notifications are "
            "audited; reads run."
        ),
    )
    version = PolicyVersion.objects.create(
        policy=policy, sensitive_systems=["prod-db", "identity"], author_label="system",
    )
    PolicyRule.objects.bulk_create(
        PolicyRule(version=version, position=i, **rule) for i, rule in enumerate(RULES)
    )
    PolicyVersion.objects.filter(pk=version.pk).update(
        status="published", number=1, published_at=timezone.now(),
        change_note="Shipped default policy.", published_by_label="system",
    )
    PolicyChange.objects.create(
        policy=policy, version=version, action="policies.version.published",
        actor_label="system",
        detail={"number": 1, "change_note": "Shipped default policy.", "rules": len(RULES),
                "parent": None},
    )


class Migration(migrations.Migration):
    dependencies = [("policies", "0002_immutability_triggers")]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
