"""The procurement agent: ask several suppliers for a quote in parallel, then order from one.

Its first step fans out: one `supplier_quote` child task per supplier, each a full task with its
own lease, checkpoints, ledger and policy routing, run in parallel on the workers while the parent
waits without a worker. The order step depends on the research step and reads the children's
quotes from its output; the order has a compensating tool, so a rollback cancels it (and the
rollback reaches the children's ledgers too).
"""

from __future__ import annotations

from typing import Any

from agentops.agents import remote
from agentops.sdk import (
    Agent,
    ChildSpec,
    ModelRequest,
    PlanStep,
    ToolContext,
    fan_out,
    register_agent,
    tool,
)

DEFAULT_SUPPLIERS = ("acme", "globex", "initech")


# A quote binds nobody and costs nothing: a read for the policy, though the supplier records it
# (so the simulated service can count quotes per idempotency key).
@tool(side_effect="read", systems=("suppliers",), idempotent_remote=True)
def request_quote(call: ToolContext, *, supplier: str, item: str, quantity: int) -> dict[str, Any]:
    """Ask a supplier for a quote for an item and quantity."""
    return remote.post(
        call,
        "suppliers",
        "quote",
        {"supplier": supplier, "item": item, "quantity": quantity},
        expect=("quote_id", "total"),
    )


@request_quote.probe
def _request_quote_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "suppliers", "quote")


@tool(side_effect="write", systems=("suppliers",), idempotent_remote=True)
def cancel_supplier_order(call: ToolContext, *, order_id: str) -> dict[str, Any]:
    """Cancel a purchase order."""
    return remote.post(call, "suppliers", "cancel", {"order_id": order_id}, expect=("status",))


@cancel_supplier_order.probe
def _cancel_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "suppliers", "cancel")


@tool(
    side_effect="financial",
    systems=("suppliers",),
    idempotent_remote=True,
    compensate_with="cancel_supplier_order",
)
def place_order(
    call: ToolContext, *, supplier: str, quote_id: str, amount: float
) -> dict[str, Any]:
    """Place a purchase order against a quote (amount: the total, in EUR)."""
    return remote.post(
        call,
        "suppliers",
        "order",
        {"supplier": supplier, "quote_id": quote_id, "amount": amount},
        expect=("order_id", "status"),
    )


@place_order.probe
def _place_order_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "suppliers", "order")


@place_order.compensation
def _place_order_undo(arguments: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": result["order_id"]}


@fan_out("supplier_research")
def supplier_research(task_input: dict[str, Any], outputs: dict[int, Any]) -> list[ChildSpec]:
    item = str(task_input.get("item", "bolts"))
    quantity = int(task_input.get("quantity", 10))
    return [
        ChildSpec(
            agent="supplier_quote",
            goal=f"Get a quote from {supplier} for {quantity} x {item}",
            input={"supplier": supplier, "item": item, "quantity": quantity},
        )
        for supplier in task_input.get("suppliers") or DEFAULT_SUPPLIERS
    ]


def supplier_quote_script(request: ModelRequest) -> dict[str, Any]:
    data = request.task_input
    arguments = {
        "supplier": str(data.get("supplier", "acme")),
        "item": str(data.get("item", "bolts")),
        "quantity": int(data.get("quantity", 10)),
    }
    return {
        "text": "Calling request_quote.",
        "tool_calls": [{"name": "request_quote", "arguments": arguments}],
        "confidence": 0.95,
    }


def procurement_script(request: ModelRequest) -> dict[str, Any]:
    children = request.latest_tool_result("children").get("children") or []
    quotes = [child["outputs"][0] for child in children if child.get("outputs")]
    best = min(quotes, key=lambda q: q["total"]) if quotes else {}
    if request.step == 1:
        name, arguments = (
            "place_order",
            {
                "supplier": best.get("supplier", "unknown"),
                "quote_id": best.get("quote_id", "unknown"),
                "amount": float(best.get("total", 0.0)),
            },
        )
    else:
        order = request.latest_tool_result("order_id")
        name, arguments = (
            "email_buyer",
            {
                "to": str(request.task_input.get("buyer", "buyer@example.com")),
                "subject": f"Purchase order {order.get('order_id', '?')}",
                "body": f"Ordered from {order.get('supplier', '?')} for {order.get('amount')} EUR.",
            },
        )
    return {
        "text": f"Calling {name}.",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": 0.92,
    }


@tool(side_effect="notify", systems=("email",), idempotent_remote=True)
def email_buyer(call: ToolContext, *, to: str, subject: str, body: str) -> dict[str, Any]:
    """Email the buyer the purchase order."""
    return remote.post(
        call, "email", "send", {"to": to, "subject": subject, "body": body}, expect=("message_id",)
    )


@email_buyer.probe
def _email_buyer_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "email", "send")


register_agent(
    Agent(
        name="supplier_quote",
        needs=(remote.SERVICES,),
        description="Ask one supplier for a quote (spawned by procurement).",
        system_prompt="You ask one supplier for a quote. Request it once.",
        tools=["request_quote"],
        plan=[PlanStep("Request a quote", "request_quote")],
        script=supplier_quote_script,
        hidden=True,
    )
)

register_agent(
    Agent(
        name="procurement",
        needs=(remote.SERVICES,),
        description="Ask three suppliers for quotes in parallel, then order from the cheapest.",
        system_prompt="You are a buyer. Compare the suppliers' quotes, order once from the "
        "cheapest, then tell the buyer.",
        tools=["place_order", "email_buyer"],
        plan=[
            PlanStep("Research suppliers", fan_out="supplier_research"),
            PlanStep("Place the order", "place_order", depends_on=(0,)),
            PlanStep("Email the buyer", "email_buyer", depends_on=(1,)),
        ],
        script=procurement_script,
    )
)
