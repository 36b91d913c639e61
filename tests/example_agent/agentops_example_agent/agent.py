"""The parcel-notice agent: locate a customer's parcel, then tell them where it is.

Importing this module registers the agent and its tools; the package's entry point names it, so
every process of a deployment that installs the package imports it once at start-up.
"""

from __future__ import annotations

from typing import Any

from agentops.sdk import Agent, ModelRequest, Need, PlanStep, register_agent
from agentops_example_agent.tools import locate_parcel, notify_customer

PLAN = [
    PlanStep("Locate the parcel", locate_parcel.name),
    PlanStep(
        "Email the customer",
        notify_customer.name,
        depends_on=(0,),
        instruction="Say where the parcel is and who carries it, in two sentences.",
    ),
]


def parcel_notice_script(request: ModelRequest) -> dict[str, Any]:
    """What the scripted model answers (tests, demos): the call a model would propose, read
    from the same request a real model gets."""
    order_id = str(request.task_input["order_id"])
    if request.step == 0:
        call = {"name": locate_parcel.name, "arguments": {"order_id": order_id}}
    else:
        parcel = request.latest_tool_result("carrier")  # the first step's result
        call = {
            "name": notify_customer.name,
            "arguments": {
                "to": f"customer-{order_id.lower()}@example.com",
                "subject": f"Your order {order_id}",
                "body": f"Your parcel is {parcel['status']}, carried by {parcel['carrier']}.",
            },
        }
    return {"tool_calls": [call], "confidence": 0.95}


register_agent(
    Agent(
        name="parcel_notice",
        description="Tell a customer where their parcel is (an example agent package).",
        system_prompt="You tell customers where their parcel is: locate it, then email them once.",
        tools=[locate_parcel.name, notify_customer.name],
        plan=PLAN,
        script=parcel_notice_script,
        # What the deployment must set for it: unset, the agent is not offered, `task_create`
        # refuses it and `check --deploy` names the variable. The tools read it as
        # `ToolContext.base_url`.
        needs=(Need("AGENTOPS_SIM_BASE_URL", "the base URL of the logistics and email services"),),
        # The model: None is the deployment's (AGENTOPS_MODEL_ADAPTER, OPENAI_MODEL).
        adapter=None,
        model=None,
        # The context: the prompt stays under half of this window (older steps are summarised),
        # and three steps in a row below this confidence stop the task for a person.
        context_window=16_000,
        confidence_floor=0.6,
    )
)
