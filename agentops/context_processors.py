"""Template context every page shares: the engine's status enums, so templates compare a status
with `TaskStatus.RETRY_SCHEDULED` instead of repeating its string; and the fleet's stops in force,
for the banner every page shows (`base.html`), read only when a page renders it."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.http import HttpRequest

from agentops.states import AuditStatus, GateStatus, LedgerStatus, StepStatus, TaskStatus

STATUSES = {
    "TaskStatus": TaskStatus,
    "StepStatus": StepStatus,
    "LedgerStatus": LedgerStatus,
    "GateStatus": GateStatus,
    "AuditStatus": AuditStatus,
}


def statuses(request: HttpRequest) -> dict[str, Any]:
    return STATUSES


class FleetStops:
    """The stops in force, read on first use: a fragment that does not render the banner asks
    the database nothing."""

    @cached_property
    def in_force(self) -> list[Any]:
        from agentops.engine.stops import stops_in_force

        return stops_in_force()


def fleet_stops(request: HttpRequest) -> dict[str, Any]:
    """For people signed in: a stop's reason is not for anonymous visitors (the login page)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"fleet_stops": FleetStops()}
