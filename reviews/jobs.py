"""RQ entry points of the reviews app. A job carries an id and nothing else (its meta may carry
the id of the request that enqueued it, for its log lines)."""

from __future__ import annotations

from agentops.plumbing.logs import job_request_context


def delivery_send(delivery_id: int) -> str:
    """Send one notification delivery; a no-op when it is sent, failed or not yet due."""
    from reviews.notifications import delivery_send as send

    with job_request_context():
        return send(delivery_id=int(delivery_id))


def slack_message_update(message_id: int) -> str:
    """Show a gate's state on its Slack message (a no-op when it shows it already)."""
    from reviews.slack import slack_message_update as update

    with job_request_context():
        return update(message_id=int(message_id))
