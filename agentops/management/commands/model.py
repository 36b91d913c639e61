"""`python manage.py model check [--agent NAME] [--json]`: preflight a model server."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.engine.errors import UnknownAgent
from agentops.engine.preflight import model_check
from agentops.engine.registry import get_agent


class Command(BaseCommand):
    help = (
        "check: hold a short conversation with the configured model (two tool round trips and "
        "a JSON answer) and report whether it works with agentops; exits 1 when it does not."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["check"])
        parser.add_argument("--agent", help="check the model this agent uses")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            agent = get_agent(options["agent"]) if options["agent"] else None
        except UnknownAgent as exc:
            raise CommandError(str(exc)) from None
        report = model_check(agent)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            data = report.as_dict()
            for key in (
                "adapter",
                "server",
                "model",
                "calls",
                "latency_ms_total",
                "prompt_tokens",
                "completion_tokens",
                "tool_calling",
                "tool_history",
                "json_output",
            ):
                self.stdout.write(f"{key:>18}: {data[key]}")
            if report.ok:
                self.stdout.write(self.style.SUCCESS("ok: the model works with agentops"))
        if not report.ok:
            raise CommandError("model check failed: " + "; ".join(report.problems))
