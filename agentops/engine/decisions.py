"""A gate decision as one engine command: `gate_decide` approves (as proposed or with edited
arguments), rejects, or rejects and ends the task.

Under the gate's row lock it checks the gate is still open and is the one the person saw (its
arguments' digest), lets the caller's room run its own checks (`check`: the role, the claim),
validates edited arguments against the tool, asks the gate's approval kind whether the approvals
satisfy it, closes the gate along `GATE_TRANSITIONS` and makes the task's move (resume with the
approval, re-plan from the feedback, abort or roll back). Two clicks make one decision: the
second finds the gate closed (GateNotOpen). The people's room (`reviews.services.gates`) wraps
it with its log of who decided, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentops.engine.approvals import Approval, Choice, approval_kind_of
from agentops.engine.errors import AgentOpsError, StepFailure, UnknownTool
from agentops.engine.gates import gate_transition, task_gate_approved, task_gate_rejected
from agentops.engine.interventions import task_abort, task_rollback
from agentops.engine.jsonvalues import digest, redacted, validated
from agentops.engine.registry import get_tool
from agentops.models import Gate
from agentops.states import TaskStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class GateNotOpen(AgentOpsError):
    """The gate was decided first (or expired), its task moved on, or its action changed since
    the person saw it: nothing was decided."""


class DecisionRefused(AgentOpsError):
    """The decision itself cannot be taken (edited arguments the tool refuses, an unknown way
    to stop, no reason given); the message says why, for the person."""


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
                raise DecisionRefused(str(exc)) from None
        return _approve(gate, actor=actor, edited_arguments=arguments, reason=decision.reason)


def _check_offered(gate: Gate, choice: Choice) -> None:
    """Refuse a choice the gate's approval kind does not offer, and an answer (which is
    `question_answer`'s: it carries the answer, not a decision)."""
    kind = approval_kind_of(gate)
    if not kind.offers(choice):
        raise DecisionRefused(kind.choice_refusal(choice))
    if choice == Choice.ANSWER:
        raise DecisionRefused("an answer is given with question_answer, not gate_decide")


def _edited(decision: GateDecision) -> dict[str, Any]:
    if not isinstance(decision.arguments, dict):
        raise DecisionRefused("the edited arguments must be a JSON object")
    edited: dict[str, Any] = redacted(validated(decision.arguments, "arguments"))
    return edited


def _check_stop(decision: GateDecision) -> None:
    if decision.outcome not in STOP_OUTCOMES:
        raise DecisionRefused("choose abort (keep the effects) or rollback (undo them)")
    if not decision.reason:
        raise DecisionRefused("say why the task stops")


def locked_open_gate(gate_id: int, *, seen_digest: str | None) -> Gate:
    """The gate, row-locked, while it is open and its task waits at it (and its arguments are
    still those at `seen_digest`, when given); GateNotOpen otherwise. Caller holds the
    transaction."""
    gate = Gate.objects.select_for_update().select_related("task", "step").get(pk=gate_id)
    if not approval_kind_of(gate).is_open(gate):
        raise GateNotOpen(f"this gate is already {gate.get_status_display().lower()}")
    if gate.task.status != TaskStatus.AWAITING_APPROVAL:
        raise GateNotOpen("the task is no longer waiting at this gate")
    if seen_digest is not None and seen_digest != gate.args_digest:
        raise GateNotOpen("the proposed action changed since you opened it; review again")
    return gate


def gate_close(gate: Gate, name: str, *, actor: User, feedback: str = "", **fields: Any) -> None:
    """Close `gate` along the gate transition `name`. Caller holds the gate's row lock (so it is
    open: `locked_open_gate`) and the transaction."""
    if not gate_transition(gate_id=gate.pk, name=name, actor=actor, feedback=feedback, **fields):
        raise GateNotOpen("this gate was decided meanwhile")


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
