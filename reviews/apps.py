from __future__ import annotations

from django.apps import AppConfig


class ReviewsConfig(AppConfig):
    name = "reviews"
    verbose_name = "Human review"

    def ready(self) -> None:
        from agentops.engine.sweeper import sweep_hook_register
        from reviews.notifications import notifications_sweep

        sweep_hook_register(notifications_sweep)
