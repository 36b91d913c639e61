"""A no-op agent for the checkpoint benchmark: every step is one model call and one tool call.

The tool runs in-process (no network), so the benchmark measures the runner and its commits.
"""

from __future__ import annotations

from typing import Any

from agentops.engine.model import ModelRequest
from agentops.engine.registry import Agent, PlanStep, ToolContext, register_agent, tool

MAX_STEPS = 200


@tool(side_effect="read", systems=("bench",))
def bench_echo(call: ToolContext, *, payload: str, n: int) -> dict[str, Any]:
    """Return the payload (stands for a tool with a result of that size)."""
    return {"n": n, "payload": payload}


def bench_script(request: ModelRequest) -> dict[str, Any]:
    size = int(request.task_input.get("payload_kb", 2)) * 1024
    payload = (f"step {request.step} " * (size // 7 + 1))[:size]
    return {
        "text": "",
        "tool_calls": [
            {"name": "bench_echo", "arguments": {"payload": payload, "n": request.step}}
        ],
        "confidence": 1.0,
    }


register_agent(
    Agent(
        name="bench_noop",
        description="Benchmark: one model call and one tool call per step.",
        system_prompt="Echo the payload.",
        tools=["bench_echo"],
        plan=lambda task_input: [
            PlanStep(f"Echo {i + 1}", "bench_echo")
            for i in range(min(MAX_STEPS, int(task_input.get("steps", 20))))
        ],
        script=bench_script,
        hidden=True,
    )
)
