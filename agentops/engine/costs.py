"""What model tokens cost: the one price rule, for the runner's accounting (`Task.cost_used`),
the Prometheus counter and the dashboard's figures. The price is a setting
(AGENTOPS_COST_PER_1K_TOKENS); every step of every task prices its tokens, so the setting's
decimal is made once per value, not per call."""

from __future__ import annotations

import functools
from decimal import Decimal

from django.conf import settings


def token_cost(tokens: int) -> Decimal:
    """What `tokens` cost at the configured price."""
    return Decimal(tokens) * _price(str(settings.AGENTOPS["COST_PER_1K_TOKENS"])) / 1000


@functools.lru_cache(maxsize=8)
def _price(per_1k_tokens: str) -> Decimal:
    # Keyed by the setting's text: equal numbers of other forms (2 and 2.0) are other decimals.
    return Decimal(per_1k_tokens)
