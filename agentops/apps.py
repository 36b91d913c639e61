from __future__ import annotations

from django.apps import AppConfig


class AgentopsConfig(AppConfig):
    name = "agentops"
    verbose_name = "Agent operations"

    def ready(self) -> None:
        # Agents and tools register themselves on import.
        from agentops import agents  # noqa: F401
