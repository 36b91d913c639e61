"""The simulated third parties: orders, eligibility, logistics, payments, email, flights, hotels.

Each endpoint is a pure handler from request body to response body; `views` adds what real APIs do
around it: idempotency keys, probes, recorded effects and injected faults. Data is derived
deterministically from identifiers, so every run and every test sees the same world.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class NotFound(Exception):
    pass


class BadRequest(Exception):
    pass


class Conflict(Exception):
    """The request is valid but the world says no (a hotel fully booked): 409."""


@dataclass(frozen=True)
class Endpoint:
    service: str
    operation: str
    handler: Callable[[dict[str, Any]], dict[str, Any]]
    writes: bool
    # Whether the remote deduplicates by Idempotency-Key, and answers probes for a key.
    keys: bool
    probe: bool

    @property
    def scope(self) -> str:
        """The OAuth scope a scoped token must carry to call this endpoint."""
        return f"{self.service}:{self.operation}"


ENDPOINTS: dict[tuple[str, str], Endpoint] = {}


def endpoint(
    service: str, operation: str, *, writes: bool = False, keys: bool = True, probe: bool = True
) -> Callable[
    [Callable[[dict[str, Any]], dict[str, Any]]], Callable[[dict[str, Any]], dict[str, Any]]
]:
    def register(
        fn: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        ENDPOINTS[(service, operation)] = Endpoint(service, operation, fn, writes, keys, probe)
        return fn

    return register


def _number(text: str, modulo: int) -> int:
    return zlib.crc32(text.encode()) % modulo


def _require(body: dict[str, Any], *names: str) -> list[Any]:
    missing = [n for n in names if n not in body]
    if missing:
        raise BadRequest(f"missing fields: {', '.join(missing)}")
    return [body[n] for n in names]


def order(order_id: str) -> dict[str, Any]:
    if not (isinstance(order_id, str) and order_id[:1].isalpha() and order_id[1:].isdigit()):
        raise NotFound(f"no order {order_id!r}")
    amount = 15 + _number(order_id, 280)
    return {
        "order_id": order_id,
        "customer_email": f"customer-{order_id.lower()}@example.com",
        "amount": float(amount),
        "currency": "EUR",
        "status": "delivered",
        "items": [{"sku": f"SKU-{_number(order_id, 9000) + 1000}", "qty": 1}],
    }


@endpoint("orders", "lookup")
def orders_lookup(body: dict[str, Any]) -> dict[str, Any]:
    (order_id,) = _require(body, "order_id")
    return order(order_id)


@endpoint("eligibility", "check")
def eligibility_check(body: dict[str, Any]) -> dict[str, Any]:
    order_id, reason = _require(body, "order_id", "reason")
    data = order(order_id)
    eligible = reason in {"damaged", "not_received", "wrong_item", "changed_mind"}
    return {
        "order_id": order_id,
        "eligible": eligible,
        "max_refund": data["amount"],
        "rule": "30-day returns" if eligible else f"reason {reason!r} is not refundable",
    }


@endpoint("logistics", "track")
def logistics_track(body: dict[str, Any]) -> dict[str, Any]:
    (order_id,) = _require(body, "order_id")
    order(order_id)
    return {
        "order_id": order_id,
        "status": "delivered",
        "carrier": ["DHL", "UPS", "PostNL"][_number(order_id, 3)],
    }


@endpoint("payments", "refund", writes=True)
def payments_refund(body: dict[str, Any]) -> dict[str, Any]:
    order_id, amount = _require(body, "order_id", "amount")
    data = order(order_id)
    if not isinstance(amount, (int, float)) or amount <= 0 or amount > data["amount"]:
        raise BadRequest(f"refund amount must be in (0, {data['amount']}]")
    return {
        "refund_id": f"rf_{_number(order_id + str(amount), 10**8):08d}",
        "order_id": order_id,
        "amount": amount,
        "currency": data["currency"],
        "status": "refunded",
    }


@endpoint("payments", "refund_legacy", writes=True, keys=False, probe=False)
def payments_refund_legacy(body: dict[str, Any]) -> dict[str, Any]:
    return payments_refund(body)


@endpoint("payments", "charge", writes=True)
def payments_charge(body: dict[str, Any]) -> dict[str, Any]:
    reference, amount = _require(body, "reference", "amount")
    return {
        "charge_id": f"ch_{_number(str(reference) + str(amount), 10**8):08d}",
        "amount": amount,
        "status": "captured",
    }


@endpoint("payments", "credit", writes=True)
def payments_credit(body: dict[str, Any]) -> dict[str, Any]:
    """A goodwill store credit on the customer's account (at most half the order's amount)."""
    order_id, amount = _require(body, "order_id", "amount")
    data = order(order_id)
    cap = round(data["amount"] / 2, 2)
    if not isinstance(amount, (int, float)) or amount <= 0 or amount > cap:
        raise BadRequest(f"credit amount must be in (0, {cap}]")
    return {
        "credit_id": f"cr_{_number(order_id + str(amount), 10**8):08d}",
        "order_id": order_id,
        "amount": amount,
        "currency": data["currency"],
        "status": "credited",
    }


@endpoint("email", "send", writes=True)
def email_send(body: dict[str, Any]) -> dict[str, Any]:
    to, subject = _require(body, "to", "subject")
    return {"message_id": f"msg_{_number(str(to) + str(subject), 10**8):08d}", "status": "sent"}


@endpoint("flights", "search")
def flights_search(body: dict[str, Any]) -> dict[str, Any]:
    origin, destination, date = _require(body, "origin", "destination", "date")
    base = _number(f"{origin}{destination}{date}", 400) + 80
    return {
        "flights": [
            {
                "flight_id": f"FL{_number(f'{origin}{destination}{date}{i}', 9000) + 1000}",
                "origin": origin,
                "destination": destination,
                "date": date,
                "price": float(base + 35 * i),
            }
            for i in range(3)
        ]
    }


@endpoint("flights", "book", writes=True)
def flights_book(body: dict[str, Any]) -> dict[str, Any]:
    flight_id, passenger = _require(body, "flight_id", "passenger")
    return {
        "booking_id": f"FB{_number(f'{flight_id}{passenger}', 10**6):06d}",
        "flight_id": flight_id,
        "status": "confirmed",
    }


@endpoint("flights", "cancel", writes=True)
def flights_cancel(body: dict[str, Any]) -> dict[str, Any]:
    (booking_id,) = _require(body, "booking_id")
    return {"booking_id": booking_id, "status": "cancelled"}


@endpoint("hotels", "search")
def hotels_search(body: dict[str, Any]) -> dict[str, Any]:
    city, check_in, nights = _require(body, "city", "check_in", "nights")
    return {
        "hotels": [
            {
                "hotel_id": f"H{_number(f'{city}{check_in}{i}', 9000) + 1000}",
                "city": city,
                "price_per_night": float(60 + _number(f"{city}{i}", 140)),
                "nights": nights,
            }
            for i in range(3)
        ]
    }


# Hotels that are fully booked on every date (the plan-repair demo books one of them).
SOLD_OUT_HOTELS = frozenset({"H0404"})


@endpoint("hotels", "book", writes=True)
def hotels_book(body: dict[str, Any]) -> dict[str, Any]:
    hotel_id, guest, nights = _require(body, "hotel_id", "guest", "nights")
    if not isinstance(nights, int) or nights < 1:
        raise BadRequest("nights must be a positive integer")
    if hotel_id in SOLD_OUT_HOTELS:
        raise Conflict(f"hotel {hotel_id} is fully booked on these dates")
    return {
        "booking_id": f"HB{_number(f'{hotel_id}{guest}{nights}', 10**6):06d}",
        "hotel_id": hotel_id,
        "status": "confirmed",
    }


@endpoint("hotels", "cancel", writes=True)
def hotels_cancel(body: dict[str, Any]) -> dict[str, Any]:
    (booking_id,) = _require(body, "booking_id")
    return {"booking_id": booking_id, "status": "cancelled"}


@endpoint("suppliers", "quote", writes=True)
def suppliers_quote(body: dict[str, Any]) -> dict[str, Any]:
    """A supplier's quote for an item: recorded at the supplier, binding nobody to anything."""
    supplier, item, quantity = _require(body, "supplier", "item", "quantity")
    if not isinstance(quantity, int) or quantity < 1:
        raise BadRequest("quantity must be a positive integer")
    unit_price = float(2 + _number(f"{supplier}{item}", 700) / 100)
    return {
        "quote_id": f"Q{_number(f'{supplier}{item}{quantity}', 10**6):06d}",
        "supplier": supplier,
        "item": item,
        "quantity": quantity,
        "unit_price": unit_price,
        "total": round(unit_price * quantity, 2),
        "lead_days": 2 + _number(f"{supplier}lead", 9),
    }


@endpoint("suppliers", "order", writes=True)
def suppliers_order(body: dict[str, Any]) -> dict[str, Any]:
    supplier, quote_id, amount = _require(body, "supplier", "quote_id", "amount")
    return {
        "order_id": f"PO{_number(f'{supplier}{quote_id}', 10**6):06d}",
        "supplier": supplier,
        "quote_id": quote_id,
        "amount": amount,
        "status": "placed",
    }


@endpoint("suppliers", "cancel", writes=True)
def suppliers_cancel(body: dict[str, Any]) -> dict[str, Any]:
    (order_id,) = _require(body, "order_id")
    return {"order_id": order_id, "status": "cancelled"}
