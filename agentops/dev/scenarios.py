"""Named demo scenarios: a task, the faults the simulated services inject, what a person does.

Used by `manage.py demo_scenario` (real workers, end to end) and by `seed_demo` (so an operator
sees these situations on the first `make run`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentops.dev import mcpgit
from agentops.dev.sim.services import fault_set
from agentops.engine import PlanEdit, task_create, task_plan_repair
from agentops.models import Task

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Fault:
    endpoint: str  # "service.operation"
    mode: str
    count: int | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    agent: str
    goal: str
    input: dict[str, Any]
    faults: tuple[Fault, ...] = ()
    # What a person does once the task stops: nothing, "rollback", "retry_child" (retry the
    # child task that stopped, alone; the parent resumes when it succeeds), "grant" (grant the
    # scope a service refused, through the API), "answer" (answer the agent's question,
    # through the API), "approve" (approve each gate the task opens) or "repair_plan" (make
    # the `repairs`, one by one, then retry the task under the repaired plan).
    then: Literal["rollback", "retry_child", "grant", "answer", "approve", "repair_plan"] | None = (
        None
    )
    # Settings for the scenario's processes, over the demo's defaults.
    env: dict[str, str] = field(default_factory=dict)
    # What the person sends with `then` (the grant's duration, whom, why; the answer).
    person: dict[str, Any] = field(default_factory=dict)
    # Builds what the task needs at its start (a temporary repository), merged into `input`.
    prepare: Callable[[], dict[str, Any]] | None = None
    repairs: tuple[PlanEdit, ...] = ()


# Tool calls time out after 2 s in scenarios, so "timeout" faults sleep a little longer.
# Amounts stay at or under 100 EUR, which the default policy routes to the audit lane: these
# scenarios run without a person; amounts above 100 stop at an approval gate instead.
TOOL_TIMEOUT = "2"

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "refund-happy",
            "A refund that goes through: five steps, one refund, one email.",
            "refund",
            "Refund order A1001: the parcel arrived damaged",
            {"order_id": "A1001", "reason": "damaged"},
        ),
        Scenario(
            "refund-429",
            "The payments API rate-limits the refund once; the step is retried automatically.",
            "refund",
            "Refund order A1003 (payments rate-limited once)",
            {"order_id": "A1003", "reason": "damaged"},
            faults=(Fault("payments.refund", "429", count=1, delay=1),),
        ),
        Scenario(
            "refund-timeout-after-charge",
            "The refund is made but the answer times out; the probe finds it, no second refund.",
            "refund",
            "Refund order A1004 (payments times out after refunding)",
            {"order_id": "A1004", "reason": "damaged"},
            faults=(Fault("payments.refund", "execute_then_timeout", count=1, delay=3),),
        ),
        Scenario(
            "refund-unknown",
            "The legacy refund API has no probe and no keys: after a timeout nobody can tell "
            "whether the refund happened, so the task stops for a person to confirm.",
            "refund",
            "Refund order A2000 through the legacy API (times out after refunding)",
            {"order_id": "A2000", "reason": "damaged", "refund_api": "legacy"},
            faults=(Fault("payments.refund_legacy", "execute_then_timeout", count=1, delay=3),),
        ),
        Scenario(
            "trip-hotel-fails",
            "The flight is booked, then the hotel refuses: the task stops half done.",
            "trip",
            "Book a trip to Rome for Ada (the hotel refuses)",
            {"traveller": "Ada Lovelace", "destination": "FCO", "date": "2026-12-17"},
            faults=(Fault("hotels.book", "forbidden", count=1),),
        ),
        Scenario(
            "trip-hotel-fails-rollback",
            "As trip-hotel-fails, then an operator rolls back: the flight is cancelled once.",
            "trip",
            "Book a trip to Athens for Grace (the hotel refuses; rolled back)",
            {"traveller": "Grace Hopper", "destination": "ATH", "date": "2026-12-15"},
            faults=(Fault("hotels.book", "forbidden", count=1),),
            then="rollback",
        ),
        Scenario(
            "fanout-one-child-fails",
            "Three suppliers are asked for a quote in parallel (three child tasks); one refuses "
            "once and stops alone, an operator retries just that child, the parent resumes, "
            "orders from the cheapest and completes. Completed children never rerun.",
            "procurement",
            "Buy 10 bolts from the cheapest of three suppliers (one refuses once)",
            {"item": "bolts", "quantity": 10, "suppliers": ["acme", "globex", "initech"]},
            faults=(Fault("suppliers.quote", "forbidden", count=1),),
            then="retry_child",
        ),
        Scenario(
            "grant-scope",
            "The goodwill agent's credential lacks payments:credit: the payments service refuses "
            "the credit naming that scope, the task stops, a scope granter grants exactly that "
            "scope to the task for 15 minutes (through the API, with a reason), and the step "
            "continues under the grant; no other step runs again.",
            "goodwill",
            "Credit 10 EUR to the customer of order A1010 (late parcel)",
            {"order_id": "A1010", "amount": 10},
            then="grant",
            person={
                "minutes": 15,
                "to": "task",
                "reason": "The credit tool was added after the agent's credential was issued.",
            },
        ),
        Scenario(
            "ask-human",
            "The refund_ask agent looks the order up and asks a person how much to refund (the "
            "built-in ask_human tool, three options); the task waits in the question lane with "
            "no worker held, an operator answers 'half' through the API, and the agent refunds "
            "half and tells the customer.",
            "refund_ask",
            "Refund the damaged item of order A1001 (ask how much)",
            {"order_id": "A1001", "note": "the lid is cracked"},
            then="answer",
            person={"choice": "half"},
        ),
        Scenario(
            "mcp-git",
            "An agent takes its tools from the reference MCP git server (mcp-server-git, "
            "spawned by the worker): it reads the status (auto lane), its commit waits at a "
            "gate (a write, by the default policy), an operator approves it, and it commits "
            "exactly once, then reads the log.",
            "mcp_git",
            "Commit the staged changelog",
            {},
            then="approve",
            env={"AGENTOPS_TOOL_TIMEOUT_SECONDS": "10"},
            prepare=mcpgit.repository_prepare,
        ),
        Scenario(
            "model-summary",
            "A refund under a model with a small context window (800 tokens): the last "
            "step's prompt summarizes the first steps by rule, and the model (the scripted one "
            "here) writes its own summary of them beside it, counted in the task's tokens; the "
            "task page shows the two side by side.",
            "refund",
            "Refund order A1001: the parcel arrived damaged (a model with a small window)",
            {"order_id": "A1001", "reason": "damaged"},
            env={"AGENTOPS_CONTEXT_WINDOW_TOKENS": "800"},
        ),
        Scenario(
            "plan-repair",
            "The flight is booked, then the hotel answers that it is fully booked (409): a "
            "logic failure, so the advisor recommends repairing the plan. A person tells the "
            "hotel step to book another hotel and inserts a step that copies the itinerary to "
            "the office, then retries: the runner follows the repaired plan; the search and "
            "the flight booking are not run again.",
            "trip",
            "Book a trip to Rome for Ada (her hotel is fully booked)",
            {"traveller": "Ada Lovelace", "destination": "FCO", "hotel_id": "H0404"},
            then="repair_plan",
            repairs=(
                PlanEdit(
                    "instruct",
                    ordinal=2,
                    instruction="Hotel H0404 is fully booked: book hotel H7000 instead.",
                ),
                PlanEdit(
                    "insert",
                    ordinal=4,
                    title="Copy the itinerary to the office",
                    tool="send_itinerary",
                    instruction="Send a copy to office@example.com.",
                    depends_on=(1,),
                ),
            ),
        ),
    ]
}


def scenario_repair(name: str, task: Task) -> int:
    """Make the scenario's plan repairs on its stopped task, the last one with a retry, as a
    person would from the recovery panel. Returns how many were made."""
    repairs = SCENARIOS[name].repairs
    for index, edit in enumerate(repairs):
        task_plan_repair(
            task_id=task.pk,
            edit=edit,
            actor=None,
            reason=f"scenario {name}",
            then_retry=index == len(repairs) - 1,
        )
    return len(repairs)


def scenario_start(name: str, *, created_by: User | None = None) -> Task:
    """Set the scenario's faults on the simulated services and create its task (queued)."""
    scenario = SCENARIOS[name]
    for fault in scenario.faults:
        service, operation = fault.endpoint.split(".")
        fault_set(
            service=service,
            operation=operation,
            mode=fault.mode,
            count=fault.count,
            delay=fault.delay,
        )
    prepared = scenario.prepare() if scenario.prepare is not None else {}
    return task_create(
        agent=scenario.agent,
        goal=scenario.goal,
        input={**scenario.input, **prepared},
        created_by=created_by,
    )
