"""The agents the product ships. Importing the package registers them (and the engine's built-in
tool `ask_human`, which `refund_ask` declares); the product's entry point in the group
`agentops.agents` (pyproject.toml) names it, so every process imports it at start-up, before the
agents of other installed packages. Its modules import nothing of the product but `agentops.sdk`
and each other (tests/test_boundaries.py)."""

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
