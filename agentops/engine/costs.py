"""What model tokens cost: the one price rule, for the runner's accounting (`Task.cost_used`),
the Prometheus counter and the dashboard's figures (the price is the setting
AGENTOPS_COST_PER_1K_TOKENS)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings


def token_cost(tokens: int) -> Decimal:
    """What `tokens` cost at the configured price."""
    return Decimal(tokens) * Decimal(str(settings.AGENTOPS["COST_PER_1K_TOKENS"])) / 1000
