"""Reading a remote's `Retry-After`: seconds, milliseconds (`retry-after-ms`) or an HTTP date.

Both the model adapter and the tools' HTTP calls use it, so a date never crashes a job and a
malformed header is simply no hint.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# A hint beyond a day is treated as a day: the task parks, it does not vanish.
MAX_RETRY_AFTER_SECONDS = 86_400.0


def retry_after_seconds(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds to wait before trying again, or None when the remote gave no usable hint."""
    lowered = {key.lower(): value for key, value in headers.items()}
    seconds: float | None = None
    millis = lowered.get("retry-after-ms")
    if millis:
        seconds = _number(millis)
        seconds = seconds / 1000 if seconds is not None else None
    value = lowered.get("retry-after")
    if seconds is None and value:
        seconds = _number(value)
        if seconds is None:
            seconds = _from_date(value, now or datetime.now(UTC))
    if seconds is None:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _from_date(text: str, now: datetime) -> float | None:
    try:
        when = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - now).total_seconds()
