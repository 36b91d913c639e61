"""The trip agent: search flights, book the flight, book the hotel, send the itinerary.

Bookings have compensating tools (cancel), so a trip that stops after the flight was booked but
the hotel failed can be rolled back: the flight is cancelled exactly once, through the ledger.
"""

from __future__ import annotations

import re
from typing import Any

from agentops.agents import remote
from agentops.sdk import Agent, ModelRequest, PlanStep, ToolContext, register_agent, tool


@tool(side_effect="read", systems=("flights",))
def search_flights(
    call: ToolContext, *, origin: str, destination: str, date: str
) -> dict[str, Any]:
    """Find flights for a date."""
    return remote.post(
        call,
        "flights",
        "search",
        {"origin": origin, "destination": destination, "date": date},
        expect=("flights",),
    )


@tool(side_effect="write", systems=("flights",), idempotent_remote=True)
def cancel_flight(call: ToolContext, *, booking_id: str) -> dict[str, Any]:
    """Cancel a flight booking."""
    return remote.post(call, "flights", "cancel", {"booking_id": booking_id}, expect=("status",))


@cancel_flight.probe
def _cancel_flight_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "flights", "cancel")


@tool(
    side_effect="financial",
    systems=("flights",),
    idempotent_remote=True,
    compensate_with="cancel_flight",
)
def book_flight(
    call: ToolContext, *, flight_id: str, passenger: str, amount: float
) -> dict[str, Any]:
    """Book a seat on a flight (amount: the fare, in EUR)."""
    return remote.post(
        call,
        "flights",
        "book",
        {"flight_id": flight_id, "passenger": passenger, "amount": amount},
        expect=("booking_id", "status"),
    )


@book_flight.probe
def _book_flight_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "flights", "book")


@book_flight.compensation
def _book_flight_undo(arguments: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"booking_id": result["booking_id"]}


@tool(side_effect="write", systems=("hotels",), idempotent_remote=True)
def cancel_hotel(call: ToolContext, *, booking_id: str) -> dict[str, Any]:
    """Cancel a hotel booking."""
    return remote.post(call, "hotels", "cancel", {"booking_id": booking_id}, expect=("status",))


@tool(
    side_effect="financial",
    systems=("hotels",),
    idempotent_remote=True,
    compensate_with="cancel_hotel",
)
def book_hotel(
    call: ToolContext, *, hotel_id: str, guest: str, nights: int, amount: float
) -> dict[str, Any]:
    """Book hotel nights (amount: the total, in EUR)."""
    return remote.post(
        call,
        "hotels",
        "book",
        {"hotel_id": hotel_id, "guest": guest, "nights": nights, "amount": amount},
        expect=("booking_id", "status"),
    )


@book_hotel.probe
def _book_hotel_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "hotels", "book")


@book_hotel.compensation
def _book_hotel_undo(arguments: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"booking_id": result["booking_id"]}


@tool(side_effect="notify", systems=("email",), idempotent_remote=True)
def send_itinerary(call: ToolContext, *, to: str, subject: str, body: str) -> dict[str, Any]:
    """Email the itinerary to the traveller."""
    return remote.post(
        call, "email", "send", {"to": to, "subject": subject, "body": body}, expect=("message_id",)
    )


@send_itinerary.probe
def _itinerary_probe(call: ToolContext) -> dict[str, Any] | None:
    return remote.probe(call, "email", "send")


TRIP_TOOLS = ("search_flights", "book_flight", "book_hotel", "send_itinerary")


def _hotel_named(instruction: str) -> str | None:
    """The hotel a person told the step to book ("H0404 is full: book hotel H7000 instead"),
    as a model would read it: the one after "book", else the last one named."""
    wanted = re.search(r"\bbook (?:hotel )?(H\d{3,})\b", instruction, flags=re.IGNORECASE)
    named = re.findall(r"\b(H\d{3,})\b", instruction)
    return wanted.group(1) if wanted else (named[-1] if named else None)


def _address_named(instruction: str) -> str | None:
    """An email address a person named in the step's instruction ("copy office@example.com")."""
    found = re.search(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", instruction)
    return found.group(0) if found else None


def trip_script(request: ModelRequest) -> dict[str, Any]:
    data = request.task_input
    traveller = str(data.get("traveller", "Ada Lovelace"))
    # The plan's tool for the step says what to do (a repaired plan moves steps around); a step
    # without one is placed by its position in the standard plan.
    which = (
        request.step_tool
        if request.step_tool in TRIP_TOOLS
        else TRIP_TOOLS[min(request.step, len(TRIP_TOOLS) - 1)]
    )
    if which == "search_flights":
        name, arguments = (
            "search_flights",
            {
                "origin": data.get("origin", "AMS"),
                "destination": data.get("destination", "FCO"),
                "date": data.get("date", "2026-12-17"),
            },
        )
    elif which == "book_flight":
        flights = request.latest_tool_result("flights").get("flights") or [{"flight_id": "FL0000"}]
        cheapest = min(flights, key=lambda f: f.get("price", 0))
        name, arguments = (
            "book_flight",
            {
                "flight_id": cheapest["flight_id"],
                "passenger": traveller,
                "amount": cheapest.get("price", 0.0),
            },
        )
    elif which == "book_hotel":
        name, arguments = (
            "book_hotel",
            {
                "hotel_id": _hotel_named(request.instruction) or data.get("hotel_id", "H4242"),
                "guest": traveller,
                "nights": int(data.get("nights", 1)),
                "amount": float(data.get("hotel_amount", 90.0)),
            },
        )
    else:
        # The itinerary states what the ledger booked (edits at a gate included).
        flight = request.executed_arguments("book_flight")
        # A hotel the service refused (or a hotel step replaced) booked nothing.
        booked = request.latest_tool_result("hotel_id")
        hotel = request.executed_arguments("book_hotel") if booked else {}
        stay = (
            f" and {hotel.get('nights', '?')} night(s) at hotel {hotel.get('hotel_id', '?')} are"
            if hotel
            else " is booked; the hotel is not part of this trip, and it"
        )
        name, arguments = (
            "send_itinerary",
            {
                "to": _address_named(request.instruction) or data.get("email", "ada@example.com"),
                "subject": "Your trip",
                "body": f"Flight {flight.get('flight_id', '?')}{stay} booked for {traveller}.",
            },
        )
    return {
        "text": f"Calling {name}.",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": float(data.get("confidence", 0.9)),
    }


register_agent(
    Agent(
        name="trip",
        needs=(remote.SERVICES,),
        description="Book a flight and a hotel, then send the itinerary.",
        system_prompt="You are a travel agent. Book the cheapest flight, then the hotel, then "
        "send the itinerary. Never book twice.",
        tools=["search_flights", "book_flight", "book_hotel", "send_itinerary"],
        plan=[
            PlanStep("Search flights", "search_flights"),
            PlanStep("Book the flight", "book_flight", depends_on=(0,)),
            PlanStep("Book the hotel", "book_hotel"),
            # The itinerary needs the booked flight; a hotel booked by other means (its step
            # skipped) still leaves an itinerary to send.
            PlanStep("Send the itinerary", "send_itinerary", depends_on=(1,)),
        ],
        script=trip_script,
        editable_input=("hotel_id", "nights", "hotel_amount", "email"),
        # When the hotel cannot be booked, the traveller may book it themselves.
        strategies={
            "flight_only": [
                PlanStep("Search flights", "search_flights"),
                PlanStep("Book the flight", "book_flight", depends_on=(0,)),
                PlanStep(
                    "Send the itinerary",
                    "send_itinerary",
                    depends_on=(1,),
                    instruction="Say that the traveller books the hotel themselves.",
                ),
            ]
        },
    )
)
