"""The agents this deployment registers. Importing the package registers them."""

from __future__ import annotations

from agentops.agents import bench, mcpdemo, procurement, refund, triage, trip  # noqa: F401
