"""RQ entry points of the reviews app. A job carries an id and nothing else (its meta may carry
the id of the request that enqueued it, for its log lines)."""

from __future__ import annotations

from agentops.logs import job_request_context


def delivery_send(delivery_id: int) -> str:
    """Send one notification delivery; a no-op when it is sent, failed or not yet due."""
    from reviews.notifications import delivery_send as send

    with job_request_context():
        return send(delivery_id=int(delivery_id))


def slack_message_update(gate_id: int, channel: str, ts: str, late_slack_user: str = "") -> str:
    """Show a gate's outcome on its Slack message (retried by RQ when Slack is unreachable)."""
    from reviews.slack import gate_message_update

    with job_request_context():
        return gate_message_update(
            gate_id=int(gate_id), channel=channel, ts=ts, late_slack_user=late_slack_user
        )
