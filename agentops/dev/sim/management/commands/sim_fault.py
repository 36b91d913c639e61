"""`manage.py sim_fault`: set, list and reset the simulated services' faults while they run.

A thin interface over `agentops.dev.sim.services`; every invalid endpoint or mode ends in a
CommandError that lists the valid choices.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.dev.sim.models import Fault, FaultMode
from agentops.dev.sim.services import FaultInvalid, endpoint_names, fault_reset, fault_set
from agentops.dev.sim.world import ENDPOINTS


def endpoint_faults() -> list[dict[str, Any]]:
    """Every endpoint with the fault in force on it and what it supports, sorted by name."""
    faults = {(f.service, f.operation): f for f in Fault.objects.all()}
    rows = []
    for (service, operation), ep in sorted(ENDPOINTS.items()):
        fault = faults.get((service, operation))
        spent = fault is not None and fault.remaining == 0
        rows.append(
            {
                "endpoint": f"{service}.{operation}",
                "mode": FaultMode.OK.value if fault is None or spent else fault.mode,
                "remaining": (
                    "spent"
                    if spent
                    else "-"
                    if fault is None or fault.mode == FaultMode.OK
                    else "every call"
                    if fault.remaining is None
                    else str(fault.remaining)
                ),
                "delay": f"{fault.delay_seconds:g}" if fault else "0",
                "writes": "yes" if ep.writes else "no",
                # A read records no effect, so keys and probes mean nothing for it.
                "keys": "n/a" if not ep.writes else "yes" if ep.keys else "no",
                "probe": "n/a" if not ep.writes else "yes" if ep.probe else "no",
            }
        )
    return rows


def _endpoint(value: str) -> tuple[str, str]:
    service, dot, operation = value.partition(".")
    if not dot or (service, operation) not in ENDPOINTS:
        raise CommandError(
            f"unknown endpoint {value!r}; valid endpoints: {', '.join(endpoint_names())}"
        )
    return service, operation


class Command(BaseCommand):
    help = (
        "Set a fault on a simulated endpoint (SERVICE.OPERATION MODE [--count N] [--delay S]), "
        "list every endpoint's fault (--list), or reset faults to ok (--reset [SERVICE.OPERATION])."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("endpoint", nargs="?", help="SERVICE.OPERATION, e.g. payments.refund")
        parser.add_argument("mode", nargs="?", help=f"one of: {', '.join(FaultMode.values)}")
        parser.add_argument(
            "--count",
            type=int,
            default=None,
            help="fail only the next N calls, then behave normally",
        )
        parser.add_argument(
            "--delay",
            type=float,
            default=0.0,
            help="seconds to wait (timeout and slow modes) or to announce in Retry-After (429)",
        )
        parser.add_argument(
            "--list",
            action="store_true",
            dest="list_faults",
            help="list every endpoint with its current fault",
        )
        parser.add_argument(
            "--reset", action="store_true", help="reset one endpoint, or all of them, to ok"
        )

    def handle(
        self,
        *args: Any,
        endpoint: str | None,
        mode: str | None,
        count: int | None,
        delay: float,
        list_faults: bool,
        reset: bool,
        **options: Any,
    ) -> None:
        if list_faults:
            if endpoint or mode or reset:
                raise CommandError("--list takes no other arguments")
            self._list()
            return
        if reset:
            if mode:
                raise CommandError("--reset takes at most an endpoint, not a mode")
            self._reset(endpoint)
            return
        if not endpoint or not mode:
            raise CommandError(
                "give SERVICE.OPERATION and MODE, or --list, or --reset; valid modes: "
                f"{', '.join(FaultMode.values)}"
            )
        service, operation = _endpoint(endpoint)
        try:
            fault = fault_set(
                service=service, operation=operation, mode=mode, count=count, delay=delay
            )
        except FaultInvalid as exc:
            raise CommandError(str(exc)) from None
        scope = "every call" if fault.remaining is None else f"the next {fault.remaining} call(s)"
        if fault.mode == FaultMode.OK:
            self.stdout.write(f"{endpoint}: ok")
        else:
            self.stdout.write(f"{endpoint}: {fault.mode} for {scope}, delay {delay:g} s")

    def _reset(self, endpoint: str | None) -> None:
        if endpoint is None:
            changed = fault_reset()
            self.stdout.write(f"reset {changed} endpoint(s) to ok")
            return
        service, operation = _endpoint(endpoint)
        changed = fault_reset(service=service, operation=operation)
        self.stdout.write(f"{endpoint}: ok" + ("" if changed else " (was already)"))

    def _list(self) -> None:
        rows = endpoint_faults()
        columns = ["endpoint", "mode", "remaining", "delay", "writes", "keys", "probe"]
        widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
        self.stdout.write("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
        for row in rows:
            self.stdout.write("  ".join(row[c].ljust(widths[c]) for c in columns).rstrip())
