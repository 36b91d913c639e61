"""Run a named scenario end to end with real processes and print its outcome."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Collection
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q

from agentops.dev import mcpgit
from agentops.dev.devstack import Stack, free_port
from agentops.dev.fleet_stop import FLEET_STOP_SCENARIO, fleet_stop_run
from agentops.dev.people import person_act
from agentops.dev.people_scenarios import PEOPLE_SCENARIOS, people_scenario_run
from agentops.dev.scenarios import (
    SCENARIOS,
    TOOL_TIMEOUT,
    Scenario,
    scenario_repair,
    scenario_start,
)
from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_reset
from agentops.engine import Choice, GateDecision, gate_decide, task_retry, task_rollback
from agentops.engine.questions import ASK_HUMAN, QUESTION
from agentops.models import Event, Gate, ScopeGrant, Task
from agentops.selectors import task_get_recovery
from agentops.states import TERMINAL, GateStatus, LedgerStatus, StepStatus, TaskStatus

SETTLED = {*TERMINAL, TaskStatus.NEEDS_ATTENTION}
# A task waiting at a gate has settled too, for a scenario whose person decides it (the
# ask-human scenario answers the question; mcp-git approves the gated commit).
SETTLED_OR_GATED = {*SETTLED, TaskStatus.AWAITING_APPROVAL}


class Command(BaseCommand):
    help = "Run a demo scenario end to end (sim services, a worker, the sweeper) and report it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "name", choices=sorted({*SCENARIOS, *PEOPLE_SCENARIOS, FLEET_STOP_SCENARIO})
        )
        parser.add_argument("--json", action="store_true", dest="as_json")
        parser.add_argument("--timeout", type=float, default=90.0)

    def handle(
        self, *args: object, name: str, as_json: bool, timeout: float, **options: object
    ) -> None:
        if name == FLEET_STOP_SCENARIO:
            # Its own stack: four workers (agentops.dev.fleet_stop).
            self.stdout.write(json.dumps(fleet_stop_run(timeout=timeout), indent=2, default=str))
            return
        stack = Stack(quiet=True)
        stack.env.update(
            AGENTOPS_TOOL_TIMEOUT_SECONDS=TOOL_TIMEOUT,
            AGENTOPS_BACKOFF_BASE_SECONDS="0.5",
            AGENTOPS_SWEEP_INTERVAL_SECONDS="0.5",
        )
        if name in PEOPLE_SCENARIOS:
            self._people(name, stack=stack, as_json=as_json, timeout=timeout)
            return
        scenario = SCENARIOS[name]
        stack.env.update(scenario.env)
        try:
            stack.start_sim(free_port())
            task = scenario_start(name)
            stack.spawn("worker")
            stack.spawn("sweeper")
            if scenario.then == "approve":
                task = self._approve_gates(task.pk, timeout)
            task = self._wait(
                task.pk, SETTLED_OR_GATED if scenario.then == "answer" else SETTLED, timeout
            )
            if scenario.then == "rollback" and task.status == TaskStatus.NEEDS_ATTENTION:
                task_rollback(task_id=task.pk, actor=None, reason=f"scenario {name}")
                task = self._wait(task.pk, TERMINAL, timeout)
            repair: dict[str, Any] = {}
            if scenario.then == "repair_plan" and task.status == TaskStatus.NEEDS_ATTENTION:
                repair = self._repair(name, task, timeout)
                task = Task.objects.get(pk=task.pk)
            stopped = self._stopped_child(task)
            if scenario.then == "retry_child" and stopped is not None:
                task_retry(task_id=stopped.pk, actor=None, reason=f"scenario {name}")
                task = self._wait(task.pk, TERMINAL, timeout)
            if scenario.then == "grant" and task.status == TaskStatus.NEEDS_ATTENTION:
                person_act(stack, scenario, task)
                task = self._wait(task.pk, TERMINAL, timeout)
            if scenario.then == "answer" and task.status == TaskStatus.AWAITING_APPROVAL:
                person_act(stack, scenario, task)
                task = self._wait(task.pk, TERMINAL, timeout)
        finally:
            stack.stop()
            for fault in scenario.faults:
                service, operation = fault.endpoint.split(".")
                fault_reset(service=service, operation=operation)
        report = self._report(scenario, task)
        if scenario.then == "repair_plan":
            report.update(repair)
        if as_json:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self._print(report)

    def _approve_gates(self, task_id: int, timeout: float) -> Task:
        """Approve each gate the task opens, as the demo's operator, until it settles."""
        approver = mcpgit.demo_approver()
        while True:
            task = self._wait(task_id, SETTLED_OR_GATED, timeout)
            if task.status != TaskStatus.AWAITING_APPROVAL:
                return task
            gate = Gate.objects.filter(task=task, status=GateStatus.OPEN).first()
            if gate is None:
                time.sleep(0.2)
                continue
            gate_decide(
                gate_id=gate.pk,
                decision=GateDecision(Choice.APPROVE, reason=f"scenario {task.agent}"),
                actor=approver,
                seen_digest=gate.args_digest,
            )

    def _repair(self, name: str, task: Task, timeout: float) -> dict[str, Any]:
        """Repair the stopped task's plan and retry it; what ran before the repair, and
        whether any of it ran again (completed steps, effects) once the task finished."""
        recommended = task_get_recovery(task_id=task.pk)
        done = list(
            task.steps.filter(status=StepStatus.SUCCEEDED).values_list("ordinal", flat=True)
        )
        effects_before = self._effects(task)
        last_seq = task.last_seq
        repairs = scenario_repair(name, task)
        self._wait(task.pk, TERMINAL, timeout)
        rerun = Event.objects.filter(
            task=task, seq__gt=last_seq, step_ordinal__in=done, action="agentops.step.started"
        ).count()
        effects_after = self._effects(task)
        return {
            "recommended_before_repair": recommended.action if recommended else None,
            "repairs": repairs,
            "completed_before_repair": [o + 1 for o in done],
            "completed_steps_rerun": rerun,
            "effects_before_repair": dict(sorted(effects_before.items())),
            "effects_repeated": sum(
                max(0, effects_after.get(endpoint, 0) - count)
                for endpoint, count in effects_before.items()
            ),
        }

    def _effects(self, task: Task) -> Counter[str]:
        return Counter(
            f"{service}.{operation}"
            for service, operation in Effect.objects.filter(
                request_key__startswith=f"t{task.pk}-"
            ).values_list("service", "operation")
        )

    def _people(self, name: str, *, stack: Stack, as_json: bool, timeout: float) -> None:
        """A scenario in which people act over the API (agentops.dev.people_scenarios)."""
        try:
            stack.start_sim(free_port())
            stack.spawn("worker")
            stack.spawn("sweeper")
            report = people_scenario_run(
                name,
                stack=stack,
                wait=lambda task_id, statuses, seconds: self._wait(task_id, statuses, seconds),
                timeout=timeout,
            )
        finally:
            stack.stop()
        self.stdout.write(json.dumps(report, indent=2, default=str))

    def _stopped_child(self, task: Task) -> Task | None:
        return task.children.filter(status=TaskStatus.NEEDS_ATTENTION).order_by("id").first()

    def _wait(self, task_id: int, statuses: Collection[str], timeout: float) -> Task:
        """Wait for the task to reach `statuses`; a parent waiting on its children has settled
        when every child is terminal or stopped for a person and one is stopped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            task = Task.objects.get(pk=task_id)
            if task.status in statuses:
                return task
            children = set(task.children.values_list("status", flat=True))
            if (
                statuses is SETTLED
                and task.status == TaskStatus.AWAITING_CHILDREN
                and TaskStatus.NEEDS_ATTENTION in children
                and children <= SETTLED
            ):
                return task
            time.sleep(0.2)
        raise CommandError(f"task {task_id} did not settle within {timeout:g} s ({task.status})")

    def _report(self, scenario: Scenario, task: Task) -> dict[str, Any]:
        children = list(task.children.order_by("fanout_index"))
        family = Q()
        for member in [task, *children]:
            family |= Q(request_key__startswith=f"t{member.pk}-")
        per_key = Counter(Effect.objects.filter(family).values_list("request_key", flat=True))
        effects = Counter(
            f"{service}.{operation}"
            for service, operation in Effect.objects.filter(family).values_list(
                "service", "operation"
            )
        )
        recovery = task_get_recovery(task_id=task.pk)
        return {
            "scenario": scenario.name,
            "task_id": task.pk,
            "task_status": task.status,
            "steps": [
                {
                    "ordinal": step.ordinal,
                    "title": step.title,
                    "status": step.status,
                    "attempts": step.attempts,
                    "failure_kind": (step.error or {}).get("kind"),
                    "instruction": (step.spec or {}).get("instruction", ""),
                }
                for step in task.steps.order_by("ordinal")
            ],
            "failure": task.failure,
            "recommended_action": recovery.action if recovery else None,
            "rationale": recovery.rationale if recovery else None,
            "children": [
                {
                    "task_id": child.pk,
                    "agent": child.agent,
                    "goal": child.goal,
                    "status": child.status,
                    "claims": child.claims,
                    "steps_completed": child.events.filter(
                        action="agentops.step.completed"
                    ).count(),
                }
                for child in children
            ],
            "effects": dict(sorted(effects.items())),
            "effects_per_key_max": max(per_key.values(), default=0),
            # Starts of each step (a step that ran once has 1): what a recovery ran again.
            "step_starts": dict(
                sorted(
                    Counter(
                        task.events.filter(action="agentops.step.started").values_list(
                            "step_ordinal", flat=True
                        )
                    ).items()
                )
            ),
            "grants": ScopeGrant.objects.filter(
                Q(task=task)
                | Q(task__isnull=True, agent=task.agent, created_at__gte=task.created_at)
            ).count(),
            # The agent's questions to people and the answers they gave (the tool's results).
            "questions": task.gates.filter(approval_kind=QUESTION).count(),
            "answers": [
                (call.result or {}).get("answer")
                for call in task.tool_calls.filter(
                    tool=ASK_HUMAN, status=LedgerStatus.SUCCEEDED
                ).order_by("id")
            ],
            **(self._mcp_report(task) if scenario.agent == "mcp_git" else {}),
            **self._summaries_report(task),
        }

    def _summaries_report(self, task: Task) -> dict[str, Any]:
        """The model-written summaries of the task's earlier work (`engine.summaries`), and
        the tokens they cost (counted in the task's `tokens_used`)."""
        summaries = [
            {"step": (ordinal or 0) + 1, **payload["summary"]}
            for ordinal, payload in task.events.filter(
                action="agentops.step.model_result", payload__has_key="summary"
            )
            .order_by("seq")
            .values_list("step_ordinal", "payload")
        ]
        return {
            "tokens_used": task.tokens_used,
            "summaries": summaries,
            "summary_tokens": sum(int(s.get("tokens") or 0) for s in summaries),
        }

    def _mcp_report(self, task: Task) -> dict[str, Any]:
        ledger = mcpgit.mcp_ledger(task)
        return {
            "mcp_calls": len(ledger),
            "mcp_ledger": ledger,
            "commits_made": mcpgit.commits_made(task),
        }

    def _print(self, report: dict[str, Any]) -> None:
        self.stdout.write(f"{report['scenario']}: task {report['task_id']} {report['task_status']}")
        for step in report["steps"]:
            kind = f"  ({step['failure_kind']})" if step["failure_kind"] else ""
            self.stdout.write(
                f"  step {step['ordinal'] + 1} {step['title']}: {step['status']}, "
                f"{step['attempts']} attempt(s){kind}"
            )
        if report["recommended_action"]:
            self.stdout.write(
                f"  recommended: {report['recommended_action']}: {report['rationale']}"
            )
        for child in report["children"]:
            self.stdout.write(
                f"  child task {child['task_id']} ({child['agent']}): {child['status']}, "
                f"steps completed {child['steps_completed']}"
            )
        self.stdout.write(f"  effects: {report['effects']}")
        self.stdout.write(f"  effects per key (max): {report['effects_per_key_max']}")
        self.stdout.write(f"  step starts: {report['step_starts']}; grants: {report['grants']}")
        self.stdout.write(f"  questions: {report['questions']}; answers: {report['answers']}")
        for call in report.get("mcp_ledger", []):
            self.stdout.write(
                f"  MCP call {call['tool']} ({call['side_effect']}, {call['route']}): "
                f"{call['status']}"
            )
        if "commits_made" in report:
            self.stdout.write(f"  commits made: {report['commits_made']}")
        for summary in report["summaries"]:
            self.stdout.write(
                f"  model summary before step {summary['step']} (steps 1-"
                f"{summary['through_step']}, {summary.get('model', '?')}): {summary['status']}, "
                f"{summary['tokens']} tokens"
            )
