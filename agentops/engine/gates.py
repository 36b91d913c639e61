"""The engine's waiting states: the gate a step parks on, and the audit record of an autonomous
step.

A gate is opened, and an audit item queued, inside the runner's fenced transaction, so a gate is
open exactly while its task waits at it. A gate's status moves only here, along
`agentops.states.GATE_TRANSITIONS`, with a conditional UPDATE from the declared sources: a gate
is decided once, and the loser of a race changes zero rows. A decision (a person's, through
`reviews`, or the clock's on an overdue gate) is `engine.decisions`', which closes the gate here
(`gate_transition`) and moves the task with the moves the interventions use too
(`transition_or_refuse` and its kin: a task leaving its gate without a decision withdraws it);
the engine never imports `reviews`. What a timeout does to a gate
(escalate, expire) is told to the hooks other apps register (`gate_hook_register`), in the same
transaction, so the people's decision log records it once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from agentops.engine.approvals import approval_kind_for
from agentops.engine.dispatch import task_enqueue
from agentops.engine.errors import TransitionRefused
from agentops.engine.jsonvalues import loaded, redacted
from agentops.engine.registry import Tool
from agentops.engine.transitions import (
    EventSpec,
    step_transition,
    task_append_event,
    task_transition,
)
from agentops.models import AuditItem, Gate, Step, Task, ToolCall
from agentops.states import GATE_TRANSITIONS
from policies.catalog import amount_of
from policies.engine import GateSettings, Verdict
from policies.phrases import Phrase, gettext_noop

DEFAULT_GATE_TIMEOUT_SECONDS = 3600

# Told what the sweeper did to an overdue gate, inside its transaction: `hook(gate, what=...,
# reason=..., detail=...)` with `what` "escalated" or "expired" (registered in AppConfig.ready()).
GateHook = Callable[..., None]
GATE_HOOKS: list[GateHook] = []


def gate_hook_register(hook: GateHook) -> None:
    if hook not in GATE_HOOKS:
        GATE_HOOKS.append(hook)


def gate_hooks_call(gate: Gate, *, what: str, reason: str, detail: dict[str, Any]) -> None:
    """Tell the registered hooks what the sweeper did to `gate` (in the caller's transaction)."""
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
    """Open the gate a task parks on, of the approval kind its verdict's settings name (who,
    and how many, decide it: `approval_kind_for`). Caller (the runner) holds the transaction
    and the lease."""
    settings = verdict.gate or GateSettings()
    timeout = int(settings.timeout_seconds or DEFAULT_GATE_TIMEOUT_SECONDS)
    confidence = (loaded(step.model_response) or {}).get("confidence")
    return Gate.objects.create(
        task=task,
        step=step,
        tool=tool.name,
        side_effect=tool.side_effect,
        arguments=arguments,
        args_digest=args_digest,
        edited=edited,
        amount=gate_amount(amount_of(arguments)),
        confidence=confidence if isinstance(confidence, (int, float)) else None,
        policy_version_id=verdict.version_id,
        policy_version_number=verdict.version,
        rule=verdict.rule,
        reasons=list(verdict.reasons),
        approver_group=settings.approver_group or "operators",
        timeout_action=settings.timeout_action or "reject",
        escalate_to=settings.escalate_to or "",
        approval_kind=approval_kind_for(settings),
        second_approver_group=(
            settings.second_approver_group if settings.approvals_required > 1 else ""
        ),
        due_at=timezone.now() + timedelta(seconds=timeout),
    )


# Gate.amount is numeric(14, 2): what rounds to 10^12 or more (or is not finite) cannot be stored.
GATE_AMOUNT_LIMIT = Decimal(10) ** 12


def gate_amount(amount: float | None) -> Decimal | None:
    """The amount the gate's column can hold: the policy routed on the argument as it is (its
    reasons say so), and the panel shows the arguments whole; an amount the column cannot hold
    is left out of it rather than failing the commit that opens the gate."""
    if amount is None or not math.isfinite(amount) or abs(amount) >= GATE_AMOUNT_LIMIT:
        return None
    value = Decimal(amount).quantize(Decimal("0.01"))  # within 28 digits: below 10^12
    return value if abs(value) < GATE_AMOUNT_LIMIT else None


def audit_item_of(
    *, task: Task, step: Step, call: ToolCall, verdict: Verdict, sampled: bool
) -> AuditItem:
    """The audit item (not saved) that queues an autonomous decision for review: the runner's
    commit inserts it with the call's ledger row (`Commit.audit_insert`)."""
    return AuditItem(
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


# -- a task leaving or coming back to its waits: people's moves and gate decisions -----------


def transition_or_refuse(
    task_id: int,
    name: str,
    *,
    actor: User | None,
    reason: str = "",
    said: Mapping[str, Any] | None = None,
    **fields: Any,
) -> int:
    """Apply an unfenced transition or raise TransitionRefused; returns the task's last seq.
    `said` adds to the transition event's payload (how a person named the move).

    Caller holds the transaction.
    """
    moved = task_transition(
        task_id=task_id,
        name=name,
        actor=actor,
        payload={**({"reason": redacted(reason)} if reason else {}), **(said or {})},
        **fields,
    )
    if not moved:
        status = Task.objects.filter(pk=task_id).values_list("status", flat=True).first()
        if status is None:
            raise Task.DoesNotExist(f"task {task_id} does not exist")
        raise TransitionRefused(
            Phrase(
                gettext_noop("task %(task)s is %(status)s; cannot %(action)s"),
                {"task": task_id, "status": status, "action": name.replace("_", " ")},
            )
        )
    # A task leaving its gate any other way than by a decision on it withdraws the gate (a
    # decision closes its gate before resuming, so then there is nothing left to withdraw).
    gates_withdraw(task_id=task_id, because=name)
    return Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()


def resume_or_refuse(task_id: int, *, actor: User | None, reason: str = "", **fields: Any) -> int:
    """Resume a parked task: back to the queue, no pending retry time, failure cleared; its mode
    stays unless `mode` is given. Caller holds the transaction and enqueues the job."""
    return transition_or_refuse(
        task_id,
        "resume",
        actor=actor,
        reason=reason,
        next_run_at=None,
        failure=None,
        **fields,
    )


def step_reset_or_refuse(step: Step, **fields: Any) -> None:
    """Put a stopped (failed or running) step back to pending, or refuse: its fold event must
    not be written for a row that did not change."""
    if not step_transition(step=step, name="reset", **fields):
        raise TransitionRefused(
            Phrase(
                gettext_noop("step %(step)s is %(status)s; it cannot be reset"),
                {"step": step.ordinal + 1, "status": step.status},
            )
        )


def resume_events_enqueue(task_id: int, *, actor: User | None, events: list[EventSpec]) -> None:
    """Append the events of a move after its transition, then enqueue the task's job with the
    last seq as its token. Caller holds the transaction (the job is enqueued on commit)."""
    seq = Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).get()
    for event in events:
        seq = task_append_event(task_id=task_id, event=event, actor=actor)
    task_enqueue(task_id, token=seq)


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
