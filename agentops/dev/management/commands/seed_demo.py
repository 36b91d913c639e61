from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from agentops.dev.scenarios import scenario_start
from agentops.engine import task_create
from agentops.models import Task

DEMO_USERS = [
    # username, password, superuser, groups (one demo user per role; the operator also starts tasks)
    ("admin", "admin", True, ()),
    ("operator", "operator", False, ("operators", "task starters")),
    ("auditor", "auditor", False, ("auditors",)),
    ("policyadmin", "policyadmin", False, ("policy admins",)),
]

# Scenarios an operator should see on the first start: a refund that goes through, one whose
# outcome nobody can tell (confirm it), and a trip stopped half done (roll it back or retry).
DEMO_SCENARIOS = ["refund-happy", "refund-unknown", "trip-hotel-fails"]
DEMO_TASKS: list[tuple[str, dict[str, Any]]] = [
    # 108 EUR: above the default policy's threshold, so it waits at an approval gate.
    ("Refund order B2002: never received", {"order_id": "B2002", "reason": "not_received"}),
    (
        "Refund order C3003 (the model is rate limited once on step 2)",
        {"order_id": "C3003", "reason": "wrong_item", "model_faults": {"1": ["429"]}},
    ),
]


class Command(BaseCommand):
    help = "Create the demo users and, on an empty database, a few demo tasks. Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--allow-demo-users",
            action="store_true",
            help="create the demo users (with their well-known passwords) outside development mode",
        )

    def handle(self, *args: object, allow_demo_users: bool, **options: object) -> None:
        if not settings.DEV and not allow_demo_users:
            raise CommandError(
                "seed_demo creates users whose passwords are public (admin / admin); outside "
                "development mode (AGENTOPS_DEV=1) it needs --allow-demo-users."
            )
        User = get_user_model()
        with transaction.atomic():
            for username, password, superuser, groups in DEMO_USERS:
                user = User.objects.filter(username=username).first()
                if user is None:
                    create = (
                        User.objects.create_superuser if superuser else User.objects.create_user
                    )
                    user = create(username=username, password=password)
                if not user.email:
                    # An example address, so the development console shows the notices' emails.
                    user.email = f"{username}@example.com"
                    user.save(update_fields=["email"])
                # The groups come from the reviews/policies migrations; what each role may do
                # is registered by its app (policies.permissions, agentops.permissions,
                # reviews.roles).
                user.groups.add(*Group.objects.filter(name__in=groups))
        self.stdout.write(
            "demo logins: "
            + ", ".join(f"{name} / {password}" for name, password, _, _ in DEMO_USERS)
        )
        admin = User.objects.get(username="admin")
        if Task.objects.exists():
            return
        for name in DEMO_SCENARIOS:
            scenario_start(name, created_by=admin)
        for goal, task_input in DEMO_TASKS:
            task_create(agent="refund", goal=goal, input=task_input, created_by=admin)
        self.stdout.write(f"seeded {len(DEMO_SCENARIOS) + len(DEMO_TASKS)} demo tasks")
