"""Template filters of the task pages: human labels, a gate's amount with its currency, one time
format.

Filters return plain strings; templates autoescape them like any other value.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from babel import numbers
from django import template
from django.utils import formats, timezone, translation
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _

from agentops import labels
from agentops.models import Task
from agentops.selectors import LedgerRow, ledger_rows, status_label
from policies.phrases import kept

register = template.Library()


@register.filter
def with_tries(calls: Any) -> list[LedgerRow]:
    """Ledger rows, each with which try of its idempotency key it is (`ledger_rows`)."""
    return ledger_rows(calls or [])


@register.filter
def task_status(task: Task) -> str:
    """A listed task's status as people name it: "Cancelled" for one a person cancelled
    (`task_list_recent` marks them), as the task page says."""
    return status_label(task, cancelled=bool(getattr(task, "cancelled", False)))


@register.filter
def failure_label(failure: Any) -> str:
    """`labels.failure_label` as HTML: the service's name (a name, kept as written) in a
    `translate="no"` span, everything else escaped."""
    if not isinstance(failure, Mapping):
        return ""
    pattern, values = labels.failure_words(failure)
    marked = {key: conditional_escape(value) for key, value in values.items()}
    if "service" in values:
        marked["service"] = kept(values["service"])
    return mark_safe(conditional_escape(pattern) % marked)  # Every part is escaped above.


@register.filter
def event_label(action: str) -> str:
    return labels.event_label(action)


@register.filter
def side_effect_label(side_effect: str) -> str:
    return labels.side_effect_label(side_effect)


@register.filter
def recovery_action_label(action: str) -> str:
    return labels.recovery_action_label(action)


# The currencies Babel (CLDR) knows by code; any other unit is shown after the amount as given.
ISO_CURRENCIES = frozenset(numbers.list_currencies())
# The unit of the tools' amounts when a call names none (the shipped tools charge in EUR).
DEFAULT_CURRENCY = "EUR"
# Beyond this an amount is shown in scientific notation instead of hundreds of digits.
AMOUNT_DIGITS = 15
# A code (`EUR`) or a symbol (`€`) is short; anything longer is not shown as the unit.
CURRENCY_CHARS = 8


def amount_value(amount: Any) -> Decimal | None:
    """A finite number of any type as a Decimal; None for anything else (None, a boolean, text,
    NaN)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float, Decimal)):
        return None
    try:
        value = Decimal(amount) if isinstance(amount, (int, Decimal)) else Decimal(repr(amount))
    except (ArithmeticError, ValueError):
        return None
    return value if value.is_finite() else None


def amount_text(amount: Any) -> str:
    """`1,234.50` for a finite number of any type (`1.00E+300` when huge); "" for anything else
    (None, a boolean, text, NaN)."""
    value = amount_value(amount)
    if value is None:
        return ""
    if value.adjusted() >= AMOUNT_DIGITS:
        return f"{value:.2E}"
    return f"{value:,.2f}"


def currency_text(arguments: Any) -> str:
    """The `currency` a call's arguments name: a short word such as `USD`; EUR when they name
    none; `(currency unknown)` when the value is not a short word (a number, a list, a
    paragraph), so the page never claims a unit the call did not give."""
    currency = arguments.get("currency") if isinstance(arguments, dict) else None
    if currency is None or currency == "":
        return DEFAULT_CURRENCY
    if (
        isinstance(currency, str)
        and len(currency) <= CURRENCY_CHARS
        and currency.isprintable()
        and not any(c.isspace() for c in currency)
    ):
        return currency
    return _("(currency unknown)")


@register.filter
def gate_money(gate: Any) -> str:
    """A gate's amount with its currency, `108.00 EUR`, whatever its arguments hold; "" when it
    has no amount. The amount is the number the policy routed on (`Gate.amount`), the currency
    comes from the arguments (`currency_text`). The one rule for showing an amount: the inbox
    and the gate panel both use it."""
    value = amount_value(getattr(gate, "amount", None))
    if value is None:
        return ""
    currency = currency_text(getattr(gate, "arguments", None))
    if value.adjusted() < AMOUNT_DIGITS and currency in ISO_CURRENCIES:
        # As the reader's language writes it (CLDR, through Babel): €108.00, 108,00 €.
        # Always two decimals, as the amount the policy routed on was given (not CLDR's digits
        # for the currency, which would show ¥108.50 as ¥109).
        return numbers.format_currency(
            value,
            currency,
            locale=translation.to_locale(translation.get_language() or "en"),
            currency_digits=False,
        )
    return f"{amount_text(value)} {currency}"


@register.filter
def stamp(when: datetime | None) -> str:
    """The one timestamp format, in the site's time zone and the reader's language:
    `2026-11-30 06:14:51 UTC`, `2026年11月30日 06:14:51 UTC` (agentops/formats)."""
    if when is None:
        return ""
    return formats.date_format(timezone.localtime(when), "DATETIME_FORMAT")
