"""Server-rendered charts of the dashboard: inline SVG bars and plain number formats.

No script and no chart library: a bar is an SVG rect whose width is the value's share of the
largest value in its table. Values are numbers computed on the server; labels are escaped.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.translation import gettext as _

register = template.Library()


@register.simple_tag
def bar(value: float | int | None, largest: float | int | None, label: str = "") -> str:
    """An inline SVG bar, `value` as a share of `largest` (100 units wide)."""
    share = 0.0
    if value and largest:
        share = max(0.0, min(float(value) / float(largest), 1.0))
    return format_html(
        '<svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" width="120" '
        'height="12" role="img" aria-label="{}"><rect class="bar-track" width="100" '
        'height="10"></rect><rect class="bar-fill" width="{}" height="10"></rect></svg>',
        label or (_("n/a") if value is None else f"{value}"),
        f"{share * 100:.1f}",
    )


@register.filter
def percent(value: float | None, digits: int = 0) -> str:
    """0.8125 -> '81%' ('n/a' for no value)."""
    if value is None:
        return _("n/a")
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def seconds(value: float | None) -> str:
    """A duration in seconds, short: '2.4 s', '3.1 min', '1.5 h' ('n/a' for no value)."""
    if value is None:
        return _("n/a")
    value = float(value)
    if value < 60:
        return _("%(n)s s") % {"n": f"{value:.1f}"}
    if value < 3600:
        return _("%(n)s min") % {"n": f"{value / 60:.1f}"}
    return _("%(n)s h") % {"n": f"{value / 3600:.1f}"}


@register.filter
def largest(values: Any, attr: str = "") -> float:
    """The largest of `values` (or of their `attr`), for scaling a table's bars."""
    numbers = [getattr(v, attr) if attr else v for v in values]
    numbers = [n for n in numbers if isinstance(n, (int, float))]
    return max(numbers, default=0)
