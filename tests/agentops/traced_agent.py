"""An agent whose one tool has a bug (it raises an exception the engine does not classify), for
the traces' tests: its span must name the exception's class. Imported by the test and by the
worker `tests.agentops.traced_worker` starts, so both know the agent.
"""

from __future__ import annotations

from typing import Any

from agentops.engine.model import ModelRequest
from agentops.engine.registry import Agent, PlanStep, ToolContext, register_agent, tool


class StockLedgerCorrupt(Exception):
    """What the stock tool's bug raises."""


@tool(side_effect="read", systems=("stock",))
def count_stock(call: ToolContext, *, sku: str) -> dict[str, Any]:
    """Count the stock of a SKU (it always raises: a bug)."""
    raise StockLedgerCorrupt(f"the stock ledger of {sku} does not add up")


def _script(request: ModelRequest) -> dict[str, Any]:
    return {
        "tool_calls": [{"name": "count_stock", "arguments": {"sku": request.task_input["sku"]}}],
        "confidence": 0.9,
    }


register_agent(
    Agent(
        name="stock-bot",
        system_prompt="You count stock.",
        tools=["count_stock"],
        plan=[PlanStep("Count the stock", "count_stock")],
        script=_script,
        hidden=True,
    )
)
