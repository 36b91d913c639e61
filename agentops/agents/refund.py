"""The refund agent: look up the order, check eligibility, track the shipment, refund, email.

Its tools call the simulated services over HTTP. The scripted model proposes one tool call per step
from the task input (`order_id`, `reason`, optional `amount`), as a real model would from the goal.
"""

from __future__ import annotations

import re
from typing import Any

from agentops.agents import remote
from agentops.sdk import Agent, ModelRequest, PlanStep, ToolContext, register_agent, tool


@tool(side_effect="read", systems=("orders",))
def lookup_order(call: ToolContext, *, order_id: str) -> dict[str, Any]:
    """Look up an order: amount, customer, status."""
    return remote.post(
        call,
        "orders",
        "lookup",
        {"order_id": order_id},
        expect=("order_id", "amount", "customer_email"),
    )


# Its own retry policy and deadline: the eligibility service answers in well under a second or
# not at all, so each request gets 3 s (not the global AGENTOPS_TOOL_TIMEOUT_SECONDS) and a
# failed check is tried again after 0.5 s, 1 s ... (not the global backoff base).
@tool(side_effect="read", systems=("eligibility",), timeout=3.0, backoff_base=0.5)
def check_eligibility(call: ToolContext, *, order_id: str, reason: str) -> dict[str, Any]:
    """Check whether the order may be refunded for this reason."""
    return remote.post(
        call,
        "eligibility",
        "check",
        {"order_id": order_id, "reason": reason},
        expect=("eligible", "max_refund"),
    )


@tool(side_effect="read", systems=("logistics",))
def track_shipment(call: ToolContext, *, order_id: str) -> dict[str, Any]:
    """Where the parcel is."""
    return remote.post(call, "logistics", "track", {"order_id": order_id}, expect=("status",))


# Money: one retry (with the same key) at most, then a person decides; the task's cap applies
# when it is lower.
@tool(side_effect="financial", systems=("payments",), idempotent_remote=True, max_attempts=2)
def issue_refund(
    call: ToolContext, *, order_id: str, amount: float, currency: str
) -> dict[str, Any]:
    """Refund the customer."""
    return remote.post(
        call,
        "payments",
        "refund",
        {"order_id": order_id, "amount": amount, "currency": currency},
        expect=("refund_id", "status"),
    )


@issue_refund.probe
def _refund_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "payments", "refund")


def _refund_within_eligibility(
    arguments: dict[str, Any], results: dict[str, Any]
) -> tuple[bool, str]:
    eligibility = results.get("check_eligibility") or {}
    cap = eligibility.get("max_refund")
    amount = arguments.get("amount")
    if cap is None:
        return False, "no eligibility result to compare with"
    if not isinstance(amount, (int, float)):
        return False, f"amount {amount!r} is not a number"
    verdict = "within" if amount <= cap else "above"
    return amount <= cap, f"{amount} is {verdict} the eligible maximum of {cap}"


def _order_consistent(arguments: dict[str, Any], results: dict[str, Any]) -> tuple[bool, str]:
    order = results.get("lookup_order") or {}
    eligibility = results.get("check_eligibility") or {}
    if not order:
        return False, "no order lookup to compare with"
    if order.get("order_id") != arguments.get("order_id"):
        return False, f"the refund names order {arguments.get('order_id')}, the lookup found "
        f"{order.get('order_id')}"
    if eligibility and not eligibility.get("eligible", False):
        return False, f"the eligibility check said no: {eligibility.get('rule', '')}"
    return True, f"order {order.get('order_id')} is {order.get('status', 'known')} and eligible"


@tool(side_effect="financial", systems=("payments",))
def issue_refund_legacy(
    call: ToolContext, *, order_id: str, amount: float, currency: str
) -> dict[str, Any]:
    """Refund through the legacy payments API (no idempotency keys, no probe)."""
    return remote.post(
        call,
        "payments",
        "refund_legacy",
        {"order_id": order_id, "amount": amount, "currency": currency},
        expect=("refund_id", "status"),
    )


# A reviewer sees these at the top of a refund's gate, before the arguments.
for _refund in (issue_refund, issue_refund_legacy):
    _refund.check("Amount ≤ the eligibility's max_refund")(_refund_within_eligibility)
    _refund.check("Order consistent with the claim")(_order_consistent)


@tool(side_effect="notify", systems=("email",), idempotent_remote=True)
def email_customer(call: ToolContext, *, to: str, subject: str, body: str) -> dict[str, Any]:
    """Send the customer an email."""
    return remote.post(
        call, "email", "send", {"to": to, "subject": subject, "body": body}, expect=("message_id",)
    )


@email_customer.probe
def _email_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "email", "send")


def _reviewer_cap(request: ModelRequest) -> float | None:
    """A reviewer's "at most N" in a rejection note, as a model would read it."""
    for message in request.messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            found = re.search(r"at most (\d+(?:\.\d+)?)", content)
            if content.startswith("Operator note:") and found:
                return float(found.group(1))
    return None


REFUND_PLAN = [
    PlanStep("Look up the order", "lookup_order"),
    PlanStep("Check refund eligibility", "check_eligibility", depends_on=(0,)),
    PlanStep("Track the shipment", "track_shipment", depends_on=(0,)),
    PlanStep("Issue the refund", "issue_refund", depends_on=(1, 2)),
    PlanStep("Email the customer", "email_customer", depends_on=(3,)),
]


def refund_script(request: ModelRequest) -> dict[str, Any]:
    data = request.task_input
    order_id = str(data.get("order_id", "A1001"))
    facts = request.latest_tool_result("amount")  # the order lookup, as the model read it
    amount = data.get("amount") or facts.get("amount") or 0
    cap = _reviewer_cap(request)
    if cap is not None:
        amount = min(amount, cap)
    email = facts.get("customer_email") or f"customer-{order_id.lower()}@example.com"
    # What was refunded is what the ledger ran (a person may have edited the amount at the gate),
    # read from the payment's result, else from the executed arguments; never the proposal.
    executed = request.latest_tool_result("refund_id") or request.executed_arguments(
        "issue_refund", "issue_refund_legacy"
    )
    refunded = executed.get("amount", amount)
    calls = [
        ("lookup_order", {"order_id": order_id}),
        ("check_eligibility", {"order_id": order_id, "reason": data.get("reason", "damaged")}),
        ("track_shipment", {"order_id": order_id}),
        (
            "issue_refund_legacy" if data.get("refund_api") == "legacy" else "issue_refund",
            {"order_id": order_id, "amount": amount, "currency": "EUR"},
        ),
        (
            "email_customer",
            {
                "to": email,
                "subject": f"Your refund for order {order_id}",
                "body": f"We refunded {refunded} EUR for order {order_id}.",
            },
        ),
    ]
    # By the step's title: after a handoff (triage -> refund) the plan's steps sit at other
    # ordinals than in a refund task started from scratch.
    titles = [p.title for p in REFUND_PLAN]
    index = titles.index(request.step_title) if request.step_title in titles else request.step
    name, arguments = calls[index]
    return {
        "text": f"Calling {name}.",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": float(data.get("confidence", 0.93)),
    }


register_agent(
    Agent(
        name="refund",
        needs=(remote.SERVICES,),
        description="Refund a customer's order and tell them.",
        system_prompt="You are a careful customer-service agent. Refund only eligible orders, "
        "never more than was paid, and tell the customer what you did.",
        tools=[
            "lookup_order",
            "check_eligibility",
            "track_shipment",
            "issue_refund",
            "issue_refund_legacy",
            "email_customer",
        ],
        plan=REFUND_PLAN,
        script=refund_script,
        editable_input=("amount", "reason"),
    )
)
