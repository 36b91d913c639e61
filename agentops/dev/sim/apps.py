from __future__ import annotations

from django.apps import AppConfig


class SimConfig(AppConfig):
    name = "agentops.dev.sim"
    label = "sim"
    verbose_name = "Simulated third-party services"
