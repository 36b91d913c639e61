"""The goodwill agent: look up a late order, track it, credit the customer, tell them.

Its credential is scoped (`Agent.scopes`): it was issued before the agent got the store-credit
tool, so it lacks `payments:credit`, and the payments service refuses the credit naming that scope.
A person who may grant scopes grants it to the task (or the agent) for a bounded time from the
recovery panel, and the step continues under the grant (`demo_scenario grant-scope`).
"""

from __future__ import annotations

from typing import Any

from agentops.agents import remote
from agentops.agents.refund import email_customer, lookup_order, track_shipment
from agentops.sdk import Agent, ModelRequest, PlanStep, ToolContext, register_agent, tool


@tool(side_effect="financial", systems=("payments",), idempotent_remote=True)
def issue_credit(
    call: ToolContext, *, order_id: str, amount: float, currency: str
) -> dict[str, Any]:
    """Credit the customer's account as a goodwill gesture (at most half the order)."""
    return remote.post(
        call,
        "payments",
        "credit",
        {"order_id": order_id, "amount": amount, "currency": currency},
        expect=("credit_id", "status"),
    )


@issue_credit.probe
def _credit_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "payments", "credit")


GOODWILL_PLAN = [
    PlanStep("Look up the order", "lookup_order"),
    PlanStep("Track the shipment", "track_shipment", depends_on=(0,)),
    PlanStep("Credit the customer", "issue_credit", depends_on=(0, 1)),
    PlanStep("Email the customer", "email_customer", depends_on=(2,)),
]


def goodwill_script(request: ModelRequest) -> dict[str, Any]:
    data = request.task_input
    order_id = str(data.get("order_id", "A1001"))
    facts = request.latest_tool_result("customer_email")
    email = facts.get("customer_email") or f"customer-{order_id.lower()}@example.com"
    amount = float(data.get("amount", 10))
    calls = [
        ("lookup_order", {"order_id": order_id}),
        ("track_shipment", {"order_id": order_id}),
        ("issue_credit", {"order_id": order_id, "amount": amount, "currency": "EUR"}),
        (
            "email_customer",
            {
                "to": email,
                "subject": f"A goodwill credit for order {order_id}",
                "body": f"Sorry your parcel was late: we credited {amount} EUR to your account.",
            },
        ),
    ]
    name, arguments = calls[min(request.step, len(calls) - 1)]
    return {
        "text": f"Calling {name}.",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": 0.92,
    }


register_agent(
    Agent(
        name="goodwill",
        needs=(remote.SERVICES,),
        description="Credit a customer whose parcel was late, and tell them.",
        system_prompt="You apologise to customers for late parcels: check the order and the "
        "shipment, credit a small goodwill amount, and tell the customer.",
        tools=[lookup_order.name, track_shipment.name, issue_credit.name, email_customer.name],
        plan=GOODWILL_PLAN,
        script=goodwill_script,
        editable_input=("amount",),
        # Issued before the agent got `issue_credit`: no `payments:credit`.
        scopes=("orders:lookup", "logistics:track", "email:send"),
    )
)
