"""The policies app: tiered oversight rules, their versions and their editor."""

from __future__ import annotations

from django.apps import AppConfig


class PoliciesConfig(AppConfig):
    name = "policies"
    verbose_name = "Oversight policies"

    def ready(self) -> None:
        from agentops.plumbing.web import permissions_register
        from policies.permissions import PERMISSIONS

        permissions_register(PERMISSIONS)
