"""The agents this deployment registers. Importing the package registers them (and the engine's
built-in tool `ask_human`, which `refund_ask` declares)."""

from __future__ import annotations

from agentops.agents import (  # noqa: F401
    bench,
    goodwill,
    mcpdemo,
    procurement,
    refund,
    refund_ask,
    triage,
    trip,
)
