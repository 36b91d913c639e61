"""The engine's waiting states: the gate a step parks on, and the audit record of an autonomous
step.

A gate is opened, and an audit item queued, inside the runner's fenced transaction, so a gate is
open exactly while its task waits at it. A gate's status moves only here, along
`agentops.states.GATE_TRANSITIONS`, with a conditional UPDATE from the declared sources: a gate
is decided once, and the loser of a race changes zero rows. People decide gates in `reviews`,
which calls `gate_transition` and the task services; the engine never imports `reviews`. What a
timeout does to a gate (escalate, expire) is told to the hooks other apps register
(`gate_hook_register`), in the same transaction, so the people's decision log records it once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from agentops.engine.jsonvalues import loaded, redacted
from agentops.engine.registry import Tool
from agentops.models import AuditItem, Gate, Step, Task, ToolCall
from agentops.states import GATE_TRANSITIONS, GateStatus
from policies.catalog import amount_of
from policies.engine import Verdict

DEFAULT_GATE_TIMEOUT_SECONDS = 3600

# Told what the sweeper did to an overdue gate, inside its transaction: `hook(gate, what=...,
# reason=..., detail=...)` with `what` "escalated" or "expired" (registered in AppConfig.ready()).
GateHook = Callable[..., None]
GATE_HOOKS: list[GateHook] = []


def gate_hook_register(hook: GateHook) -> None:
    if hook not in GATE_HOOKS:
        GATE_HOOKS.append(hook)


def _gate_hooks_call(gate: Gate, *, what: str, reason: str, detail: dict[str, Any]) -> None:
    for hook in GATE_HOOKS:
        hook(gate, what=what, reason=reason, detail=detail)


# -- opened by the runner, inside its fenced transaction ----------------------------------------


def gate_open(
    *,
    task: Task,
    step: Step,
    tool: Tool,
    arguments: dict[str, Any],
    args_digest: str,
    verdict: Verdict,
    edited: bool,
) -> Gate:
    """Open the gate a task parks on. Caller (the runner) holds the transaction and the lease."""
    settings = verdict.gate or {}
    timeout = int(settings.get("timeout_seconds") or DEFAULT_GATE_TIMEOUT_SECONDS)
    confidence = (loaded(step.model_response) or {}).get("confidence")
    return Gate.objects.create(
        task=task,
        step=step,
        tool=tool.name,
        side_effect=tool.side_effect,
        arguments=arguments,
        args_digest=args_digest,
        edited=edited,
        amount=_column_amount(amount_of(arguments)),
        confidence=confidence if isinstance(confidence, (int, float)) else None,
        policy_version_id=verdict.version_id,
        policy_version_number=verdict.version,
        rule=verdict.rule,
        reasons=list(verdict.reasons),
        approver_group=settings.get("approver_group") or "operators",
        timeout_action=settings.get("timeout_action") or "reject",
        escalate_to=settings.get("escalate_to") or "",
        due_at=timezone.now() + timedelta(seconds=timeout),
    )


# Gate.amount is numeric(14, 2): what it holds, for the inbox's column and sorting.
_AMOUNT_LIMIT = 10**12


def _column_amount(amount: float | None) -> float | None:
    """The amount for the gate's column, or None when it does not fit (infinite, or 10^12 and
    more: a model may propose any number); the arguments shown on the gate keep it as given."""
    if amount is None or not abs(amount) < _AMOUNT_LIMIT:
        return None
    return amount


def audit_item_create(
    *, task: Task, step: Step, call: ToolCall, verdict: Verdict, sampled: bool
) -> AuditItem:
    """Queue an autonomous decision for review. Caller (the runner) holds the transaction."""
    return AuditItem.objects.create(
        task=task,
        step=step,
        tool_call=call,
        agent=task.agent,
        tool=call.tool,
        route=verdict.route,
        sampled=sampled,
        rule=verdict.rule,
        policy_version_number=verdict.version,
    )


def audit_item_follow(*, from_call_id: int, to_call: ToolCall) -> int:
    """Move the audit item of a failed try to the call that re-issues it (same key), so the
    queue holds one truthful row per executed call. Caller (the runner) holds the transaction."""
    return AuditItem.objects.filter(tool_call_id=from_call_id).update(tool_call=to_call)


# -- the gate's status --------------------------------------------------------------------------


def _gates_moved(
    gates: QuerySet[Gate], name: str, *, actor: User | None, feedback: str, **fields: Any
) -> int:
    if {"status", "decided_at", "decided_by"} & fields.keys():
        raise ValueError(f"gate transition {name!r} sets the status and who decided itself")
    spec = GATE_TRANSITIONS[name]
    return gates.filter(status__in=spec.sources).update(
        **fields,
        status=spec.target,
        decided_at=timezone.now(),
        decided_by=actor if getattr(actor, "pk", None) else None,
        feedback=redacted(feedback),
    )


def gate_transition(
    *, gate_id: int, name: str, actor: User | None = None, feedback: str = "", **fields: Any
) -> bool:
    """Close gate `gate_id` along transition `name` (approve, reject, expire, withdraw) if it is
    still in one of its sources, stamping who decided, when, and their (redacted) feedback;
    `fields` are the other columns the decision sets (`approved_arguments`, `stopped_with`).
    False when the gate was no longer open. Caller holds the transaction."""
    return bool(
        _gates_moved(
            Gate.objects.filter(pk=gate_id), name, actor=actor, feedback=feedback, **fields
        )
    )


def gates_withdraw(*, task_id: int, because: str) -> int:
    """Close the task's open gates when it left them without a decision (aborted, paused, or
    resumed by an intervention). Caller holds the transaction that moved the task."""
    return _gates_moved(
        Gate.objects.filter(task_id=task_id),
        "withdraw",
        actor=None,
        feedback=f"withdrawn: the task was moved on ({because.replace('_', ' ')}) without a "
        "decision on this gate",
    )


# -- timeouts, from the sweeper -----------------------------------------------------------------


def gates_expire_overdue(*, now: datetime | None = None) -> int:
    """Apply each overdue gate's timeout action: escalate to another group once, else reject
    with feedback that the request timed out (the task re-plans the step, as after a person's
    rejection). Each gate in its own transaction; returns how many gates were handled."""
    # The task services import this module; the rejection is theirs.
    from agentops.services import TransitionRefused, task_gate_rejected

    now = now or timezone.now()
    handled = 0
    overdue = Gate.objects.filter(status=GateStatus.OPEN, due_at__lt=now).values_list(
        "pk", flat=True
    )
    for gate_id in list(overdue):
        with transaction.atomic():
            gate = (
                Gate.objects.select_for_update(skip_locked=True)
                .filter(pk=gate_id, status=GateStatus.OPEN, due_at__lt=now)
                .first()
            )
            if gate is None:
                continue
            waited = int((gate.due_at - gate.created_at).total_seconds())
            if gate.timeout_action == "escalate" and gate.escalate_to:
                # Still open, for another group: no status change.
                Gate.objects.filter(pk=gate.pk).update(
                    approver_group=gate.escalate_to,
                    escalate_to="",
                    due_at=now + timedelta(seconds=max(waited, 60)),
                )
                _gate_hooks_call(
                    gate,
                    what="escalated",
                    reason=f"no decision within {waited} s; escalated to {gate.escalate_to}",
                    detail={"from": gate.approver_group, "to": gate.escalate_to},
                )
            else:
                feedback = (
                    f"Nobody approved {gate.tool} within {waited} s, so it was rejected. "
                    "Propose a safer action or stop."
                )
                try:
                    with transaction.atomic():
                        gate_transition(gate_id=gate.pk, name="expire", feedback=feedback)
                        task_gate_rejected(
                            task_id=gate.task_id,
                            step_id=gate.step_id,
                            feedback=feedback,
                            actor=None,
                        )
                        _gate_hooks_call(gate, what="expired", reason=feedback, detail={})
                except TransitionRefused:
                    # The task is no longer parked at this gate: close it and move on, so one
                    # stale gate cannot stop the sweep.
                    gate_transition(gate_id=gate.pk, name="expire", feedback=feedback)
            handled += 1
    return handled


# -- read by policy dry-runs --------------------------------------------------------------------


def gate_decision_seconds(step_ids: Iterable[int]) -> dict[int, float]:
    """How long people took to decide the gates of these steps (for dry-run reviewer load)."""
    rows = Gate.objects.filter(step_id__in=list(step_ids), decided_at__isnull=False).values_list(
        "step_id", "created_at", "decided_at"
    )
    return {
        step: (decided - created).total_seconds()
        for step, created, decided in rows
        if decided is not None
    }
