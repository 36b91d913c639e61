"""Template filters of the task pages: human labels, amounts with currency, one time format.

Filters return plain strings; templates autoescape them like any other value.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from agentops import labels

register = template.Library()


@register.filter
def failure_label(failure: Any) -> str:
    return labels.failure_label(failure)


@register.filter
def event_label(action: str) -> str:
    return labels.event_label(action)


@register.filter
def money(amount: Any, currency: Any = "") -> str:
    """`108.00 EUR`: an amount always with its currency (EUR when none is recorded)."""
    if amount is None or amount == "":
        return ""
    try:
        value = f"{float(amount):,.2f}"
    except (TypeError, ValueError):
        return str(amount)
    return f"{value} {currency or 'EUR'}"


@register.filter
def stamp(when: datetime | None) -> str:
    """The one timestamp format: `2026-11-30 06:14:51 UTC`, in the site's time zone."""
    if when is None:
        return ""
    local = timezone.localtime(when)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"
