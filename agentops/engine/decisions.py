"""A gate decision as one engine command: `gate_decide` approves (as proposed or with edited
arguments), rejects, or rejects and ends the task.

Under the gate's row lock it checks the gate is still open and is the one the person saw (its
arguments' digest), lets the caller's room run its own checks (`check`: the role, the claim),
validates edited arguments against the tool, asks the gate's approval kind whether the approvals
satisfy it, closes the gate along `GATE_TRANSITIONS` and makes the task's move (resume with the
approval, re-plan from the feedback, abort or roll back). Two clicks make one decision: the
second finds the gate closed (GateNotOpen). The people's room (`reviews.services.gates`) wraps
it with its log of who decided, in the same transaction.

The rule of a decision lives here whole: the move it makes on the task (`task_gate_approved`,
`task_gate_rejected` with the rule that holds a task whose same action was rejected twice) and
the decision the clock makes on an overdue gate (`gates_expire_overdue`: escalate once, else
reject as a person would). The waiting states themselves (opening a gate, a gate's status, a task
leaving its waits) are `engine.gates`'; who must approve is the gate's kind's (`engine.approvals`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentops.engine.approvals import Approval, Choice, approval_kind_of
from agentops.engine.errors import (
    AgentOpsError,
    FailureKind,
    StepFailure,
    TransitionRefused,
    UnknownTool,
)
from agentops.engine.gates import (
    gate_hooks_call,
    gate_transition,
    resume_events_enqueue,
    resume_or_refuse,
    step_reset_or_refuse,
    transition_or_refuse,
)
from agentops.engine.interventions import task_abort, task_rollback
from agentops.engine.jsonvalues import digest, loaded, redacted, validated
from agentops.engine.registry import get_tool
from agentops.engine.transitions import EventSpec, task_append_event
from agentops.models import Event, Gate, Step
from agentops.states import GateStatus, StepStatus, TaskStatus
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class GateNotOpen(AgentOpsError):
    """The gate was decided first (or expired), its task moved on, or its action changed since
    the person saw it: nothing was decided."""


class DecisionRefused(AgentOpsError):
    """The decision itself cannot be taken (edited arguments the tool refuses, an unknown way
    to stop, no reason given); the message says why, for the person."""


# Why a gate that is no longer open cannot be decided, by its status: whole sentences.
ALREADY: dict[str, Phrase] = {
    GateStatus.APPROVED: Phrase(gettext_noop("this gate is already approved")),
    GateStatus.REJECTED: Phrase(gettext_noop("this gate is already rejected")),
    GateStatus.EXPIRED: Phrase(gettext_noop("this gate is already expired")),
}

# How "reject and stop" ends the task: abort keeps the effects, rollback undoes them.
STOP_OUTCOMES = {"abort": task_abort, "rollback": task_rollback}


@dataclass(frozen=True)
class GateDecision:
    """What a person decided on a gate. `reason` is the feedback of a rejection and the why of
    the others; `arguments` the edited arguments (EDIT); `outcome` abort or rollback (STOP)."""

    choice: Choice
    reason: str = ""
    arguments: Any = None
    outcome: str = ""


@dataclass(frozen=True)
class GateDecided:
    """What the decision did: the gate as it was when decided (locked), the approval (None for a
    rejection) and whether it closed the gate (an approval kind may want more approvals)."""

    gate: Gate
    approval: dict[str, Any] | None
    closed: bool
    # An approval: the arguments and digest on the table when it was given (an edit that does
    # not close a two-person gate replaces them on the gate), the approvals the gate holds now
    # (the new one included) and how many its kind wants.
    proposed: dict[str, Any] | None = None
    proposed_digest: str = ""
    approvals: tuple[Approval, ...] = ()
    required: int = 1


# The caller's own checks on the locked, open gate (its room's roles and claims): raises to
# refuse, before anything moves.
GateCheck = Callable[[Gate], None]


def _no_check(gate: Gate) -> None:
    return None


def gate_decide(
    *,
    gate_id: int,
    decision: GateDecision,
    actor: User,
    seen_digest: str | None,
    check: GateCheck = _no_check,
) -> GateDecided:
    """Decide gate `gate_id` as `decision` says, in one transaction (a savepoint of the caller's).

    Raises GateNotOpen when it is no longer open for this decision and DecisionRefused when the
    decision cannot be taken; whatever `check` raises refuses it too.
    """
    arguments = _edited(decision) if decision.choice == Choice.EDIT else None
    if decision.choice == Choice.STOP:
        _check_stop(decision)
    with transaction.atomic():
        gate = locked_open_gate(gate_id, seen_digest=seen_digest)
        check(gate)
        _check_offered(gate, decision.choice)
        if decision.choice == Choice.STOP:
            gate_close(
                gate, "reject", actor=actor, feedback=decision.reason, stopped_with=decision.outcome
            )
            STOP_OUTCOMES[decision.outcome](
                task_id=gate.task_id, actor=actor, reason=decision.reason
            )
            return GateDecided(gate=gate, approval=None, closed=True)
        if decision.choice == Choice.REJECT:
            gate_close(gate, "reject", actor=actor, feedback=decision.reason)
            task_gate_rejected(
                task_id=gate.task_id, step_id=gate.step_id, feedback=decision.reason, actor=actor
            )
            return GateDecided(gate=gate, approval=None, closed=True)
        if arguments is not None:
            try:
                get_tool(gate.tool).check_arguments(arguments)
            except (StepFailure, UnknownTool) as exc:
                raise DecisionRefused(exc.args[0] if exc.args else str(exc)) from None
        return _approve(gate, actor=actor, edited_arguments=arguments, reason=decision.reason)


def _check_offered(gate: Gate, choice: Choice) -> None:
    """Refuse a choice the gate's approval kind does not offer, and an answer (which is
    `question_answer`'s: it carries the answer, not a decision)."""
    kind = approval_kind_of(gate)
    if not kind.offers(choice):
        raise DecisionRefused(kind.choice_refusal(choice))
    if choice == Choice.ANSWER:
        raise DecisionRefused(
            Phrase(gettext_noop("an answer is given with question_answer, not gate_decide"))
        )


def _edited(decision: GateDecision) -> dict[str, Any]:
    if not isinstance(decision.arguments, dict):
        raise DecisionRefused(Phrase(gettext_noop("the edited arguments must be a JSON object")))
    edited: dict[str, Any] = redacted(validated(decision.arguments, "arguments"))
    return edited


def _check_stop(decision: GateDecision) -> None:
    if decision.outcome not in STOP_OUTCOMES:
        raise DecisionRefused(
            Phrase(gettext_noop("choose abort (keep the effects) or rollback (undo them)"))
        )
    if not decision.reason:
        raise DecisionRefused(Phrase(gettext_noop("say why the task stops")))


def locked_open_gate(gate_id: int, *, seen_digest: str | None) -> Gate:
    """The gate, row-locked, while it is open and its task waits at it (and its arguments are
    still those at `seen_digest`, when given); GateNotOpen otherwise. Caller holds the
    transaction."""
    gate = Gate.objects.select_for_update().select_related("task", "step").get(pk=gate_id)
    if not approval_kind_of(gate).is_open(gate):
        raise GateNotOpen(ALREADY[gate.status])
    if gate.task.status != TaskStatus.AWAITING_APPROVAL:
        raise GateNotOpen(Phrase(gettext_noop("the task is no longer waiting at this gate")))
    if seen_digest is not None and seen_digest != gate.args_digest:
        raise GateNotOpen(
            Phrase(gettext_noop("the proposed action changed since you opened it; review again"))
        )
    return gate


def gate_close(gate: Gate, name: str, *, actor: User, feedback: str = "", **fields: Any) -> None:
    """Close `gate` along the gate transition `name`. Caller holds the gate's row lock (so it is
    open: `locked_open_gate`) and the transaction."""
    if not gate_transition(gate_id=gate.pk, name=name, actor=actor, feedback=feedback, **fields):
        raise GateNotOpen(Phrase(gettext_noop("this gate was decided meanwhile")))


def step_approval(
    gate: Gate, arguments: dict[str, Any], *, edited: bool, actor: User
) -> dict[str, Any]:
    """What the step records of a person's approval at `gate` (`Step.approval`): these exact
    arguments, under this policy version and rule, by whom (`routing.approved` checks it)."""
    return {
        "gate": gate.pk,
        "tool": gate.tool,
        "arguments": arguments,
        "args_digest": digest(arguments),
        "policy_version_id": gate.policy_version_id,
        "rule": gate.rule,
        "edited": edited,
        "by": getattr(actor, "username", "") or "system",
    }


def _approve(
    gate: Gate, *, actor: User, edited_arguments: dict[str, Any] | None, reason: str
) -> GateDecided:
    """Count the approval (of the gate's arguments, or of `edited_arguments`) with the gate's
    kind; once satisfied, close the gate as approved and resume the task with the approval.
    Caller holds the transaction and the gate's row lock."""
    arguments = gate.arguments if edited_arguments is None else edited_arguments
    edited = gate.edited if edited_arguments is None else True
    approval = step_approval(gate, arguments, edited=edited, actor=actor)
    kind = approval_kind_of(gate)
    # Nobody's approval counts twice, whatever the caller's own checks let through.
    refusal = kind.person_refusal(gate, user=actor)
    if refusal is not None:
        raise DecisionRefused(refusal)
    given = Approval(
        by=approval["by"],
        user_id=getattr(actor, "pk", None),
        args_digest=approval["args_digest"],
        arguments=edited_arguments,
        at=timezone.now().isoformat(),
    )
    proposed = {"proposed": gate.arguments, "proposed_digest": gate.args_digest}
    given_all = (*kind.approvals_of(gate), given)
    if not kind.is_satisfied(gate, given_all):
        kind.approval_record(gate, given)
        return GateDecided(
            gate=gate,
            approval=approval,
            closed=False,
            approvals=kind.approvals_of(gate),
            required=kind.required,
            **proposed,
        )
    if kind.required > 1:
        # The approval that satisfies the kind is kept too: the gate lists every approver.
        kind.approval_record(gate, given)
    # The gate keeps what was proposed (`arguments`) and records what was approved, so its page
    # shows both, their digests and who edited: the ledger runs `approved_arguments`.
    gate_close(
        gate,
        "approve",
        actor=actor,
        feedback=reason,
        approved_arguments=arguments,
        approved_digest=approval["args_digest"],
        edited=edited,
    )
    task_gate_approved(task_id=gate.task_id, step_id=gate.step_id, approval=approval, actor=actor)
    return GateDecided(
        gate=gate,
        approval=approval,
        closed=True,
        approvals=tuple(a for a in given_all if a.args_digest == given.args_digest),
        required=kind.required,
        **proposed,
    )


# -- the move a decision makes on the task ---------------------------------------------------------


def task_gate_approved(
    *, task_id: int, step_id: int, approval: dict[str, Any], actor: User
) -> None:
    """Resume a task parked at a gate whose action a person approved (arguments possibly edited).

    Caller holds the transaction and has closed the gate. The approval is stored on the step; the
    runner checks it against the arguments' digest and the policy version before the call.
    """
    resume_or_refuse(task_id, actor=actor)
    step = Step.objects.get(pk=step_id, task_id=task_id)
    step_reset_or_refuse(step, attempts=0, approval=approval)
    resume_events_enqueue(
        task_id,
        actor=actor,
        events=[
            EventSpec(
                "agentops.step.approved",
                step=step.ordinal,
                payload={
                    "gate": approval.get("gate"),
                    "args_digest": approval["args_digest"],
                    "edited": approval.get("edited", False),
                },
                fold={"steps": {str(step.ordinal): StepStatus.PENDING}},
            )
        ],
    )


def task_gate_rejected(*, task_id: int, step_id: int, feedback: str, actor: User | None) -> bool:
    """Resume a task whose gated action was rejected: the step forgets the model's proposal and
    carries the feedback as a note, so the next model call re-plans it.

    The step counts rejections per arguments digest: when the same action has been rejected
    REJECT_LOOP_THRESHOLD times, the task is not resumed but held for a person (needs_attention,
    kind planning_loop), so a model that re-proposes it cannot loop through the gate forever.
    Returns True when the task was held instead of resumed. Caller holds the transaction and has
    closed the gate.
    """
    feedback = redacted(feedback)
    step = Step.objects.get(pk=step_id, task_id=task_id)
    response = loaded(step.model_response) or {}
    rejected = response.get("tool_calls") or []
    tool = rejected[0]["name"] if rejected else "the proposal"
    gate_digest = _gated_digest(step)
    counts = dict(step.spec.get("rejections") or {})
    if gate_digest:
        counts[gate_digest] = int(counts.get(gate_digest, 0)) + 1
    note = f"A reviewer rejected {tool}: {feedback}"
    spec = {**step.spec, "notes": [*(step.spec.get("notes") or []), note], "rejections": counts}
    threshold = reject_loop_threshold()
    times = counts.get(gate_digest, 0) if gate_digest else 0
    if times >= threshold:
        failure = {
            "layer": "orchestration",
            "kind": FailureKind.PLANNING_LOOP.value,
            "nature": "logic",
            "message": f"{tool} was rejected {times} times with the same arguments "
            f"(threshold {threshold}); a person decides how to go on",
            "retryable": False,
            "detail": {"args_digest": gate_digest, "rejections": times},
        }
        transition_or_refuse(task_id, "hold", actor=actor, reason=feedback, failure=failure)
    else:
        resume_or_refuse(task_id, actor=actor)
    step_reset_or_refuse(step, attempts=0, model_response=None, approval=None, spec=spec)
    events = [
        EventSpec(
            "agentops.step.rejected",
            step=step.ordinal,
            payload={"feedback": feedback, "args_digest": gate_digest, "rejections": times},
            fold={"steps": {str(step.ordinal): StepStatus.PENDING}},
        )
    ]
    if times >= threshold:
        for event in events:
            task_append_event(task_id=task_id, event=event, actor=actor)
        return True
    resume_events_enqueue(task_id, actor=actor, events=events)
    return False


def reject_loop_threshold() -> int:
    """How many rejections of the same action hold a gated task for a person (default 2)."""
    from django.conf import settings

    return int(settings.AGENTOPS["REJECT_LOOP_THRESHOLD"])


def _gated_digest(step: Step) -> str:
    """The arguments digest the step was gated with (from its gated event's payload)."""
    payload = (
        Event.objects.filter(
            task_id=step.task_id, step_ordinal=step.ordinal, action="agentops.step.gated"
        )
        .order_by("-seq")
        .values_list("payload", flat=True)
        .first()
    )
    return str((payload or {}).get("args_digest") or "")


# -- a decision by the clock: timeouts, from the sweeper -------------------------------------------


def gates_expire_overdue(*, now: datetime | None = None) -> int:
    """Apply each overdue gate's timeout action: escalate to another group once, else reject
    with feedback that the request timed out (the task re-plans the step, as after a person's
    rejection). Each gate in its own transaction; returns how many gates were handled."""
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
                gate_hooks_call(
                    gate,
                    what="escalated",
                    reason=f"no decision within {waited} s; escalated to {gate.escalate_to}",
                    detail={"from": gate.approver_group, "to": gate.escalate_to},
                )
            else:
                feedback = approval_kind_of(gate).timeout_feedback(gate, waited)
                try:
                    with transaction.atomic():
                        gate_transition(gate_id=gate.pk, name="expire", feedback=feedback)
                        task_gate_rejected(
                            task_id=gate.task_id,
                            step_id=gate.step_id,
                            feedback=feedback,
                            actor=None,
                        )
                        gate_hooks_call(gate, what="expired", reason=feedback, detail={})
                except TransitionRefused:
                    # The task is no longer parked at this gate: close it and move on, so one
                    # stale gate cannot stop the sweep.
                    gate_transition(gate_id=gate.pk, name="expire", feedback=feedback)
            handled += 1
    return handled
