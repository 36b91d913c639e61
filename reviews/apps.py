from __future__ import annotations

from django.apps import AppConfig


class ReviewsConfig(AppConfig):
    name = "reviews"
    verbose_name = "Human review"

    def ready(self) -> None:
        from agentops import prometheus
        from reviews.metrics import review_state_metrics

        prometheus.collector_register("reviews.state", review_state_metrics)
