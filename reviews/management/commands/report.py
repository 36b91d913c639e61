"""`manage.py report [--json]`: the dashboard's figures on the command line; `manage.py report
oversight [--format text|json|csv]`: the oversight report (`reviews.oversight`), per agent, with
what each section evidences of the EU AI Act's Articles 14(4) and 12.

The same selectors as the dashboard page (`reviews.metrics.figures_collect`) and the oversight
page, over the same window: the last 7 days by default, or `--since` / `--until` (dates, both
included), one agent with `--agent`.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.metrics import agent_names
from reviews.forms import DashboardFilterForm
from reviews.metrics import FAST_SECONDS, Figures, figures_collect
from reviews.oversight import EVIDENCES, OversightReport, flat, oversight_report

OVERSIGHT = "oversight"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


class Command(BaseCommand):
    help = "Print completion, resume savings, human load, reviewer quality and audit figures."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "kind",
            nargs="?",
            choices=[OVERSIGHT],
            help="oversight: the oversight report (without it: the dashboard's figures)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--format",
            choices=["text", "json", "csv"],
            default="",
            help="text (the default), json (as --json) or csv (the oversight report only)",
        )
        parser.add_argument("--since", type=date.fromisoformat, help="first day (YYYY-MM-DD)")
        parser.add_argument("--until", type=date.fromisoformat, help="last day, included")
        parser.add_argument("--agent", default="", help="only this agent's tasks")
        parser.add_argument(
            "--fast", type=float, default=FAST_SECONDS, help="fast-decision threshold (s)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        form = DashboardFilterForm(
            {
                "date_from": options["since"] or "",
                "date_to": options["until"] or "",
                "agent": options["agent"],
                "fast": options["fast"],
            },
            agents=agent_names(),
        )
        if options["agent"] and options["agent"] not in agent_names():
            raise CommandError(f"no task of agent {options['agent']!r}")
        output = options["format"] or ("json" if options["json"] else "text")
        if options["kind"] == OVERSIGHT:
            window = form.window()
            report = oversight_report(since=window.since, until=window.until)
            if window.agent:
                report.agents = [a for a in report.agents if a.agent == window.agent]
            self._oversight(report, output)
            return
        if output == "csv":
            raise CommandError("--format csv is for the oversight report: report oversight")
        figures = figures_collect(form.window(), fast_seconds=form.fast_seconds())
        if output == "json":
            self.stdout.write(json.dumps(figures.as_report(), indent=2, sort_keys=True))
            return
        self._text(figures)

    def _text(self, f: Figures) -> None:
        out = self.stdout.write
        r = f.as_report()
        out(f"Window: {r['window']['since']} to {r['window']['until']}")
        out(
            f"Completion rate: {_pct(r['completion_rate'])} "
            f"({r['tasks_reached_last_step']} of {r['tasks_settled']} settled tasks; "
            f"{r['tasks_in_flight']} in flight)"
        )
        if r["stopped_at_step"]:
            out(
                "  stopped at: "
                + ", ".join(f"step {k}: {n}" for k, n in r["stopped_at_step"].items())
            )
        if r["failure_kinds"]:
            out("  failure kinds: " + ", ".join(f"{k}: {n}" for k, n in r["failure_kinds"].items()))
        out(
            f"Tokens spent: {r['tokens_spent']}; saved by resume: {r['tokens_saved_by_resume']} "
            f"(cost {r['cost_spent']:.4f} spent, {r['cost_saved_by_resume']:.4f} saved)"
        )
        out(
            f"Gates: {r['gates']}; decision latency p50 {_s(r['decision_latency_p50_s'])}, "
            f"p95 {_s(r['decision_latency_p95_s'])}; SLA breaches {r['sla_breaches']}; "
            f"timeouts {r['timeouts_taken']}"
        )
        out("Reviewers:")
        for row in r["reviewers"]:
            out(
                f"  {row['person']}: {row['decisions']} decisions, median "
                f"{_s(row['median_seconds_to_decide'])}, approval {_pct(row['approval_rate'])}, "
                f"{row['edits']} edits, {row['fast_decisions']} under {f.fast_seconds:g} s, "
                f"streak {row['longest_approve_streak']}, bulk {_pct(row['bulk_approval_share'])}"
            )
            for flag in row["flags"]:
                out(f"    flagged: {flag}")
        out("Flag rate by rule:")
        for rule, rate in r["flag_rate_by_rule"].items():
            out(f"  {rule}: {_pct(rate)}")
        for proposal in r["proposals"]:
            out(f"Proposal: {proposal['text']}")

    def _oversight(self, report: OversightReport, output: str) -> None:
        if output == "json":
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
            return
        if output == "csv":
            self.stdout.write(report.csv_text(), ending="")
            return
        out = self.stdout.write
        out(f"Oversight report: {report.since.isoformat()} to {report.until.isoformat()}")
        if not report.agents:
            out("No agent had a step, a gate or a decision in this period.")
        for agent in report.agents:
            out(f"Agent {agent.agent}:")
            for key, figures in agent.sections().items():
                out(f"  {key.replace('_', ' ')} ({EVIDENCES[key]})")
                for name, value in flat(figures):
                    out(f"    {name}: {'n/a' if value is None else value}")
