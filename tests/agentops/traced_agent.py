"""Agents for the traces' tests: one whose tool has a bug (it raises an exception the engine does
not classify: its span must name the exception's class), and one that asks the model for its plan.
Imported by the test and by the worker `tests.agentops.traced_worker` starts, so both know them.
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


def _planner(request: ModelRequest) -> dict[str, Any]:
    if request.planning:
        return {"plan": [{"title": "Say how the stock is counted"}]}
    return {"text": "The stock is counted every night.", "confidence": 0.9}


register_agent(
    Agent(
        name="stock-planner",
        system_prompt="You plan, then answer.",
        tools=[],
        plan=None,
        script=_planner,
        hidden=True,
    )
)
