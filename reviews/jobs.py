"""RQ entry points of the reviews app. A job carries an id and nothing else."""

from __future__ import annotations


def delivery_send(delivery_id: int) -> str:
    """Send one notification delivery; a no-op when it is sent, failed or not yet due."""
    from reviews.notifications import delivery_send as send

    return send(delivery_id=int(delivery_id))
