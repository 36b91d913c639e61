"""`manage.py policy evaluate|dry-run`: the policy engine from the command line.

`evaluate` prints the verdict of the active version for an action described by flags (the tool's
side effect and systems come from the registered catalog; an unknown tool is never `auto`).
`dry-run` evaluates a draft against the recorded actions of the last N days.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from policies import catalog
from policies.dryrun import dry_run_text
from policies.engine import RUNS_NOW, evaluate
from policies.errors import PolicyNotFound
from policies.models import PolicyVersion
from policies.selectors import policy_spec_for, policy_version_active, policy_version_dry_run


class Command(BaseCommand):
    help = "Evaluate an action against the active policy, or dry-run a draft against history."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True)
        ev = sub.add_parser("evaluate", help="print the verdict of the active policy version")
        ev.add_argument("--tool", required=True, help="tool name")
        ev.add_argument("--amount", type=float, default=None, help="amount the action moves")
        ev.add_argument("--confidence", type=float, default=None, help="model confidence, 0-1")
        ev.add_argument("--agent", default="", help="agent name")
        ev.add_argument("--systems", default="", help="extra systems touched, comma-separated")
        ev.add_argument("--step", type=int, default=0, help="step index (0-based)")
        ev.add_argument("--edited", action="store_true", help="arguments edited by a human")
        ev.add_argument("--policy", default="default", help="policy name (default: default)")
        ev.add_argument("--json", action="store_true", dest="as_json", help="print JSON")
        dr = sub.add_parser("dry-run", help="evaluate a draft against recorded history")
        dr.add_argument("--draft", type=int, required=True, help="id of the version to dry-run")
        dr.add_argument("--days", type=int, default=7, help="how many days of history")
        dr.add_argument("--json", action="store_true", dest="as_json", help="print JSON")

    def handle(self, *args: Any, subcommand: str, **options: Any) -> None:
        if subcommand == "evaluate":
            self._evaluate(**options)
        else:
            self._dry_run(**options)

    def _evaluate(
        self,
        *,
        tool: str,
        amount: float | None,
        confidence: float | None,
        agent: str,
        systems: str,
        step: int,
        edited: bool,
        policy: str,
        as_json: bool,
        **_: Any,
    ) -> None:
        active = policy_version_active(policy)
        if active is None:
            raise CommandError(f"policy {policy!r} has no published version")
        action = catalog.action_for(
            tool=tool,
            agent=agent,
            step=step,
            confidence=confidence,
            edited=edited,
            systems=[s.strip() for s in systems.split(",") if s.strip()],
            amount=amount,
        )
        verdict = evaluate(policy_spec_for(active.pk), action)
        if as_json:
            self.stdout.write(
                _dumps({**verdict.as_dict(), "policy": policy, "action": _action_dict(action)})
            )
            return
        self.stdout.write(f"route: {verdict.route}")
        self.stdout.write(f"rule: {verdict.rule}")
        self.stdout.write("reasons:")
        for reason in verdict.reasons:
            self.stdout.write(f"  - {reason}")
        self.stdout.write(f"version: {verdict.version} (policy {policy})")
        if verdict.route in RUNS_NOW:
            self.stdout.write(f"sample rate: {verdict.sample_rate:g}")
        if verdict.gate:
            gate = verdict.gate
            target = f" to {gate.escalate_to}" if gate.timeout_action == "escalate" else ""
            self.stdout.write(
                f"gate: approver group {gate.approver_group}, timeout "
                f"{gate.timeout_seconds} s, then {gate.timeout_action}{target}"
            )
            if gate.approvals_required > 1:
                second = gate.second_approver_group or gate.approver_group
                self.stdout.write(
                    f"approvals: {gate.approvals_required} different people, the second of {second}"
                )

    def _dry_run(self, *, draft: int, days: int, as_json: bool, **_: Any) -> None:
        if days <= 0:
            raise CommandError("--days must be 1 or more")
        try:
            version = PolicyVersion.objects.select_related("policy").get(pk=draft)
        except PolicyVersion.DoesNotExist:
            raise CommandError(f"no policy version with id {draft}") from None
        try:
            result = policy_version_dry_run(version, days=days)
        except PolicyNotFound as exc:
            raise CommandError(str(exc)) from None
        if as_json:
            self.stdout.write(
                _dumps(
                    {
                        "policy": version.policy.name,
                        "version_id": version.pk,
                        "label": version.label,
                        **result.as_dict(),
                    }
                )
            )
            return
        self.stdout.write(
            dry_run_text(result, title=f"Dry-run of {version.policy.name} {version.label}")
        )


def _action_dict(action: Any) -> dict[str, Any]:
    return {
        "tool": action.tool,
        "side_effect": action.side_effect,
        "systems": list(action.systems),
        "amount": action.amount,
        "confidence": action.confidence,
        "agent": action.agent,
        "step": action.step,
        "edited": action.edited,
    }


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True)
