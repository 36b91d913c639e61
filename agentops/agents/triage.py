"""The triage agent: look at a customer's complaint, then hand the case to the refund agent.

Triage looks up the order and checks refund eligibility; its last step hands the task over to
`refund`, which starts from that recorded progress (it does not look the order up again), under
the same ledger and the same pinned policy version.
"""

from __future__ import annotations

from typing import Any

from agentops.agents import remote
from agentops.sdk import Agent, ModelRequest, PlanStep, register_agent


def triage_script(request: ModelRequest) -> dict[str, Any]:
    data = request.task_input
    order_id = str(data.get("order_id", "A1001"))
    calls = [
        ("lookup_order", {"order_id": order_id}),
        ("check_eligibility", {"order_id": order_id, "reason": data.get("reason", "damaged")}),
    ]
    name, arguments = calls[min(request.step, len(calls) - 1)]
    return {
        "text": f"Calling {name}.",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": 0.93,
    }


register_agent(
    Agent(
        name="triage",
        needs=(remote.SERVICES,),
        description="Look at a complaint, then hand it to the refund agent.",
        system_prompt="You triage customer complaints: find the order, check whether a refund "
        "is possible, then hand the case to the right agent.",
        tools=["lookup_order", "check_eligibility"],
        plan=[
            PlanStep("Look up the order", "lookup_order"),
            PlanStep("Check refund eligibility", "check_eligibility", depends_on=(0,)),
            PlanStep("Hand off to the refund agent", handoff="refund", depends_on=(1,)),
        ],
        script=triage_script,
    )
)
