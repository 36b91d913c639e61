"""The development tools' Django app: it holds their management commands (`bench`, `chaos`,
`demo_scenario`, `runstack`, `seed_demo`), so they exist only where the settings install it, in
development mode."""

from __future__ import annotations

from django.apps import AppConfig


class DevConfig(AppConfig):
    name = "agentops.dev"
    label = "agentops_dev"
    verbose_name = "Development tools"
