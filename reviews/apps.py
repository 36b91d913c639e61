from __future__ import annotations

from django.apps import AppConfig


class ReviewsConfig(AppConfig):
    name = "reviews"
    verbose_name = "Human review"

    def ready(self) -> None:
        # The engine calls this app only through the hooks registered here; it imports nothing
        # of `reviews`.
        from django.contrib.auth.signals import user_logged_in

        from agentops import task_page
        from agentops.engine import gate_hook_register, sweep_hook_register
        from agentops.plumbing import prometheus
        from agentops.plumbing.web import permissions_register
        from reviews import roles
        from reviews.again_page import task_again_section
        from reviews.channels import channel_register
        from reviews.channels.email import EmailChannel
        from reviews.channels.slack import SlackChannel
        from reviews.channels.web import ApiChannel, BrowserChannel
        from reviews.channels.webhook import WebhookChannel
        from reviews.grant_page import task_grants_section
        from reviews.metrics import review_state_metrics
        from reviews.notifications import notifications_sweep
        from reviews.services import (
            gate_timeout_logged,
            inbox_changes_fold,
            language_to_session,
            stopped_tasks_sweep,
        )
        from reviews.slack import slack_messages_sweep
        from reviews.task_page import task_review_section

        user_logged_in.connect(language_to_session, dispatch_uid="reviews.language_to_session")
        permissions_register(roles.PERMISSIONS)
        # The built-in channels, in the order notifications fan a notice out to them.
        for channel in (
            EmailChannel(),
            WebhookChannel(),
            SlackChannel(),
            BrowserChannel(),
            ApiChannel(),
        ):
            channel_register(channel)
        gate_hook_register(gate_timeout_logged)
        sweep_hook_register(stopped_tasks_sweep)
        sweep_hook_register(notifications_sweep)
        sweep_hook_register(slack_messages_sweep)
        sweep_hook_register(inbox_changes_fold)
        task_page.section_register(task_review_section)
        task_page.section_register(task_grants_section)
        task_page.section_register(task_again_section)
        prometheus.collector_register("reviews.state", review_state_metrics)
