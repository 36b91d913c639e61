"""Writes to the simulated services' fault table: set a fault on an endpoint, or reset it to ok.

Used by the `sim_fault` management command and the admin. Endpoints and modes are checked here, so
neither interface can store a fault the services would never apply; each write owns its
transaction. The services read the row on every call, so a change applies to the next request.
"""

from __future__ import annotations

from django.db import transaction

from agentops.dev.sim.models import Fault, FaultMode
from agentops.dev.sim.world import ENDPOINTS

# The longest a fault may hold a request (or announce in Retry-After): past every client's
# deadline, so each timeout can be shown, but never a thread of the services parked for good.
MAX_DELAY_SECONDS = 120.0


class FaultInvalid(ValueError):
    """An unknown endpoint or mode, or a count or delay out of range; the message lists choices."""


def endpoint_names() -> list[str]:
    return sorted(f"{service}.{operation}" for service, operation in ENDPOINTS)


def fault_check(*, service: str, operation: str, mode: str | None = None) -> None:
    """Raise FaultInvalid unless `service.operation` is an endpoint and `mode` a fault mode."""
    if (service, operation) not in ENDPOINTS:
        raise FaultInvalid(
            f"unknown endpoint {service}.{operation}; valid endpoints: "
            f"{', '.join(endpoint_names())}"
        )
    if mode is not None and mode not in FaultMode.values:
        raise FaultInvalid(f"unknown mode {mode!r}; valid modes: {', '.join(FaultMode.values)}")


def delay_check(delay: float) -> None:
    """Raise FaultInvalid unless `delay` is between 0 and MAX_DELAY_SECONDS."""
    if not 0 <= delay <= MAX_DELAY_SECONDS:
        raise FaultInvalid(
            f"delay must be zero or more seconds, at most {MAX_DELAY_SECONDS:g}, not {delay:g}"
        )


def fault_set(
    *,
    service: str,
    operation: str,
    mode: str,
    count: int | None = None,
    delay: float = 0.0,
) -> Fault:
    """Make the endpoint answer with `mode` for the next `count` calls (None: until reset).

    `delay` is the seconds a timeout, slow or 429 (as Retry-After) mode waits or announces; 0
    leaves the services' defaults.
    """
    fault_check(service=service, operation=operation, mode=mode)
    if count is not None and count < 1:
        raise FaultInvalid(f"count must be at least 1 (or omitted for every call), not {count}")
    delay_check(delay)
    with transaction.atomic():
        fault, _ = Fault.objects.update_or_create(
            service=service,
            operation=operation,
            defaults={
                "mode": mode,
                "remaining": None if mode == FaultMode.OK else count,
                "delay_seconds": delay,
            },
        )
    return fault


def fault_reset(
    *, service: str | None = None, operation: str | None = None, ids: list[int] | None = None
) -> int:
    """Set endpoints back to ok: one (`service` and `operation`), the rows `ids`, or all.

    Returns how many endpoints changed (rows already at ok are left alone).
    """
    faults = Fault.objects.exclude(mode=FaultMode.OK, remaining=None, delay_seconds=0.0)
    if service is not None or operation is not None:
        fault_check(service=service or "", operation=operation or "")
        faults = faults.filter(service=service, operation=operation)
    if ids is not None:
        faults = faults.filter(pk__in=ids)
    with transaction.atomic():
        return faults.update(mode=FaultMode.OK, remaining=None, delay_seconds=0.0)
