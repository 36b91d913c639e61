from __future__ import annotations

from django.apps import AppConfig


class ReviewsConfig(AppConfig):
    name = "reviews"
    verbose_name = "Human review"

    def ready(self) -> None:
        from agentops import prometheus
        from agentops.engine.sweeper import sweep_hook_register
        from reviews import roles  # noqa: F401  (registers every app's permissions)
        from reviews.metrics import review_state_metrics
        from reviews.notifications import notifications_sweep

        sweep_hook_register(notifications_sweep)
        prometheus.collector_register("reviews.state", review_state_metrics)
