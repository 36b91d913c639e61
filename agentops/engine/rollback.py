"""Rollback: undo a task's effects by running the compensating tools of its succeeded calls.

Each compensation goes through the ledger with its own key (`pending` committed before the call),
so a worker killed mid-rollback resumes without compensating anything twice. The runner hands a
task in rollback mode to `Rollback.execute` and stops the task with the failure it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q

from agentops.engine import children
from agentops.engine.checkpoints import snapshot_write
from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import OrchestrationFailure, StepFailure
from agentops.engine.jsonvalues import loaded, offloaded
from agentops.engine.leases import Heartbeat
from agentops.engine.ledger import Outcome, arguments_digest, idempotency_key, invoke, reconcile
from agentops.engine.registry import Tool, ToolContext, registered_tool
from agentops.engine.transitions import EventSpec, Lease, fenced_write, ledger_transition
from agentops.models import Task, ToolCall
from agentops.states import LedgerStatus


@dataclass
class Rollback:
    """Undo a task's effects: the compensating tools of its succeeded calls, in reverse order.

    Each compensation goes through the ledger with its own key (`pending` committed before the
    call), so a worker killed mid-rollback resumes without compensating anything twice. Effects
    whose tool has no compensation are listed as not undone. The task ends `rolled_back`.
    """

    lease: Lease
    task: Task
    http: httpx.Client
    beat: Heartbeat

    def _ordinal(self, call: ToolCall) -> int | None:
        """The step of the task being rolled back that a call belongs to (a child's: none)."""
        return call.step.ordinal if call.task_id == self.task.pk else None

    def _fold(self, call: ToolCall, ledger: dict[str, str]) -> dict[str, Any] | None:
        """A child's ledger rows are not in this task's checkpoint: its events fold nothing."""
        return {"ledger": ledger} if call.task_id == self.task.pk else None

    def execute(self) -> StepFailure | None:
        """Compensate, newest first, and end the task `rolled_back`. Returns the failure that
        stops the rollback (the caller stops the task with it), or None once it is rolled back."""
        task = self.task
        # The task's own effects and its child tasks', newest first.
        originals = (
            ToolCall.objects.filter(
                Q(task=task) | Q(task__parent=task),
                compensation_of__isnull=True,
                status=LedgerStatus.SUCCEEDED,
            )
            .select_related("step")
            .order_by("-id")
        )
        for call in originals:
            try:
                tool = registered_tool(call.tool)
                if tool.compensate_with is None:
                    continue
                failure = self._compensate(call, tool)
            except StepFailure as exc:
                failure = exc
            if failure is not None:
                return failure
        not_undone = [
            {"key": c.idempotency_key, "tool": c.tool, "side_effect": c.side_effect}
            for c in ToolCall.objects.filter(
                Q(task=task) | Q(task__parent=task),
                compensation_of__isnull=True,
                status=LedgerStatus.SUCCEEDED,
            )
            .exclude(side_effect="read")
            .order_by("id")
        ]
        event = EventSpec("agentops.task.rollback_finished", payload={"not_undone": not_undone})
        with transaction.atomic():
            seq = fenced_write(self.lease, [event], transition="roll_back")
            snapshot_write(task_id=task.pk, seq=seq)
        return None

    def _compensate(self, call: ToolCall, tool: Tool) -> StepFailure | None:
        task = self.task
        compensating = registered_tool(tool.compensate_with or "")
        original_args, original_result = loaded(call.args), loaded(call.result)
        arguments = (
            tool.compensation_args(original_args, original_result)
            if tool.compensation_args
            else original_args
        )
        row = (
            ToolCall.objects.filter(compensation_of=call)
            .exclude(status=LedgerStatus.FAILED)
            .order_by("-id")
            .first()
        )
        fresh = row is None
        if row is None:
            row = self._open(call, compensating, arguments)
        crashpoint("rollback_after_pending", step=call.step.ordinal)
        ctx = ToolContext(
            idempotency_key=row.idempotency_key,
            task_id=task.pk,
            step=call.step.ordinal,
            http=self.http,
            base_url=settings.AGENTOPS["SIM_BASE_URL"].rstrip("/"),
            timeout=compensating.timeout_or(settings.AGENTOPS["TOOL_TIMEOUT_SECONDS"]),
        )
        with self.beat.call():
            if fresh:
                outcome = invoke(compensating, ctx, arguments)
            else:
                outcome = reconcile(compensating, ctx, arguments, cause=None)
        crashpoint("rollback_after_tool_call", step=call.step.ordinal)
        if outcome.status == LedgerStatus.SUCCEEDED:
            self._record_compensated(call, row, outcome)
            return None
        failure = outcome.failure or OrchestrationFailure("the compensation failed")
        failure.detail.setdefault("compensating", {"key": row.idempotency_key, "of": call.tool})
        with transaction.atomic():
            fenced_write(
                self.lease,
                [
                    EventSpec(
                        f"agentops.ledger.{outcome.status}",
                        step=self._ordinal(call),
                        payload={"key": row.idempotency_key, "how": outcome.how},
                        fold=self._fold(call, {row.idempotency_key: outcome.status}),
                    )
                ],
            )
            ledger_transition(call_id=row.pk, target=outcome.status, error=failure.as_failure())
        failure.retryable = False
        return failure

    def _open(self, call: ToolCall, compensating: Tool, arguments: dict[str, Any]) -> ToolCall:
        digest = arguments_digest(arguments)
        key = idempotency_key(
            task_id=call.task_id, step_id=call.step_id, tool=compensating.name, args_digest=digest
        )
        event = EventSpec(
            "agentops.ledger.pending",
            step=self._ordinal(call),
            payload={
                "tool": compensating.name,
                "key": key,
                "compensates": call.idempotency_key,
                **({"child": call.task_id} if call.task_id != self.task.pk else {}),
            },
            fold=self._fold(call, {key: LedgerStatus.PENDING}),
        )
        with transaction.atomic():
            fenced_write(self.lease, [event])
            return ToolCall.objects.create(
                task_id=call.task_id,
                step_id=call.step_id,
                tool=compensating.name,
                side_effect=compensating.side_effect,
                args=arguments,
                args_digest=digest,
                idempotency_key=key,
                compensation_of=call,
            )

    def _record_compensated(self, call: ToolCall, row: ToolCall, outcome: Outcome) -> None:
        events = [
            EventSpec(
                "agentops.ledger.succeeded",
                step=self._ordinal(call),
                payload={"key": row.idempotency_key, "how": outcome.how},
                fold=self._fold(call, {row.idempotency_key: LedgerStatus.SUCCEEDED}),
            ),
            EventSpec(
                "agentops.ledger.compensated",
                step=self._ordinal(call),
                payload={"key": call.idempotency_key, "by": row.idempotency_key},
                fold=self._fold(call, {call.idempotency_key: LedgerStatus.COMPENSATED}),
            ),
        ]
        with transaction.atomic():
            fenced_write(self.lease, events)
            ledger_transition(
                call_id=row.pk,
                target=LedgerStatus.SUCCEEDED,
                result=offloaded(outcome.result, path="tool_call.result", task_id=call.task_id),
            )
            ledger_transition(call_id=call.pk, target=LedgerStatus.COMPENSATED)
            children.child_compensated_note(
                call_task_id=call.task_id,
                parent_id=self.task.pk,
                key=call.idempotency_key,
                by=row.idempotency_key,
            )
