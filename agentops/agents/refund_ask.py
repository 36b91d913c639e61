"""The refund_ask agent: a damaged item whose refund is a judgement call, so it asks a person.

It looks the order up, asks a person how much to refund (the built-in `ask_human` tool, with three
options; a person may also type an amount), refunds what the answer says, and tells the customer.
The scripted model reads the answer from the `ask_human` result, as a real model reads the tool
message (`demo_scenario ask-human`).
"""

from __future__ import annotations

import re
from typing import Any

from agentops.agents import remote
from agentops.agents.refund import email_customer, issue_refund, lookup_order
from agentops.sdk import ASK_HUMAN, Agent, ModelRequest, PlanStep, ask_human, register_agent

OPTIONS = ["the full amount", "half", "nothing"]

REFUND_ASK_PLAN = [
    PlanStep("Look up the order", lookup_order.name),
    PlanStep("Ask how much to refund", ask_human.name, depends_on=(0,)),
    PlanStep("Issue the refund", issue_refund.name, depends_on=(1,)),
    PlanStep("Email the customer", email_customer.name, depends_on=(2,)),
]


def refund_from_answer(answer: str, paid: float) -> float:
    """What a person's answer means in EUR: an offered option, or the first amount they typed
    (never more than was paid); 0 when it names none."""
    if answer == "the full amount":
        return paid
    if answer == "half":
        return round(paid / 2, 2)
    found = re.search(r"\d+(?:[.,]\d+)?", answer)
    return min(float(found.group(0).replace(",", ".")), paid) if found else 0.0


def refund_ask_script(request: ModelRequest) -> dict[str, Any]:
    data = request.task_input
    order_id = str(data.get("order_id", "A1001"))
    order = request.latest_tool_result("customer_email")
    paid = float(order.get("amount") or 0)
    email = order.get("customer_email") or f"customer-{order_id.lower()}@example.com"
    answer = str(request.latest_tool_result("answered_by").get("answer", ""))
    amount = refund_from_answer(answer, paid)
    refunded = request.latest_tool_result("refund_id").get("amount", amount)
    if request.step == 2 and amount <= 0:
        return {"text": f"The person said {answer!r}: no refund.", "tool_calls": []}
    calls = [
        (lookup_order.name, {"order_id": order_id}),
        (
            ASK_HUMAN,
            {
                "question": f"Order {order_id} ({paid} EUR) arrived damaged: "
                f"{data.get('note', 'no photo yet')}. How much should we refund?",
                "options": OPTIONS,
                "context": f"Order {order_id}, paid {paid} EUR, status {order.get('status')}.",
            },
        ),
        (issue_refund.name, {"order_id": order_id, "amount": amount, "currency": "EUR"}),
        (
            email_customer.name,
            {
                "to": email,
                "subject": f"Your refund for order {order_id}",
                "body": f"We refunded {refunded} EUR for order {order_id}.",
            },
        ),
    ]
    name, arguments = calls[min(request.step, len(calls) - 1)]
    return {
        "text": f"Calling {name}.",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": 0.9,
    }


register_agent(
    Agent(
        name="refund_ask",
        needs=(remote.SERVICES,),
        description="Refund a damaged item after asking a person how much.",
        system_prompt="You handle damaged-item complaints. You do not decide how much to refund: "
        "ask a person with ask_human, offering the options, then refund what they say and tell "
        "the customer.",
        tools=[lookup_order.name, ASK_HUMAN, issue_refund.name, email_customer.name],
        plan=REFUND_ASK_PLAN,
        script=refund_ask_script,
    )
)
