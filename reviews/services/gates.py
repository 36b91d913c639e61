"""Gate decisions, the one path every channel takes (the browser, the API, Slack, an email link,
any registered `reviews.channels.Channel`): approve, edit and approve, reject, reject and stop,
answer an agent's question, bulk approval, and the log line of a gate the sweeper timed out.

One function per decision (`gate_approve`, `gate_edit_and_approve`, `gate_reject`,
`gate_reject_and_stop`, `gate_answer`; a second approval of a four-eyes gate is `gate_approve`
again: the gate's kind counts it), and `gate_decide` for a channel that carries the choice as
data. The channel is data too (`via`), recorded on the decision. A decision is one engine command
(the gate locked and checked against the digest the person saw, so two clicks make one decision;
a choice the gate's kind does not offer refused); this module adds, once for every channel, what
is the people's: the role and the separation of duties, the claim, the required reason, and the
decision log, in the same transaction. `gate_decide_check` asks the same questions without
deciding, for a channel that confirms before it decides (the email page, the Slack modal).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from agentops import engine
from agentops.engine import (
    Choice,
    DecisionRefused,
    GateDecided,
    GateDecision,
    GateNotOpen,
    approval_kind_of,
    question_answer,
    question_of,
    redacted_cut,
)
from agentops.models import Gate
from agentops.states import TaskStatus
from policies.phrases import shown
from reviews.models import Claim
from reviews.roles import gate_decider_refusal
from reviews.services._common import (
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    claim_check_or_take_over,
    decision_record,
)
from reviews.services.approvals import approvals_detail, bulk_outcome
from reviews.states import VIA_SYSTEM, VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def gate_check_decider(*, gate: Gate, user: User) -> None:
    """Raise NotAllowed unless `user` may decide `gate` (`roles.gate_decider_refusal`)."""
    refusal = gate_decider_refusal(gate, user)
    if refusal is not None:
        raise NotAllowed(refusal)


def gate_decide_check(
    *, gate_id: int, choice: Choice, actor: User, seen_digest: str | None = None
) -> Gate:
    """The checks of a decision, without deciding, for a channel that asks the person to confirm
    (or to say why) before it decides: the gate, open, its task waiting at it, still the proposal
    at `seen_digest` (when given), `actor` allowed to decide it, and `choice` offered by its kind.

    Raises Gate.DoesNotExist, GateAlreadyDecided (decided, expired, or changed since), NotAllowed
    and ReviewError (a choice the kind does not offer). The claim is checked when deciding (taking
    an item over is asked for then), and everything again under the gate's lock."""
    gate = Gate.objects.select_related("task", "decided_by").get(pk=gate_id)
    kind = approval_kind_of(gate)
    if not kind.is_open(gate):
        raise GateAlreadyDecided(
            _("this gate is already %(status)s") % {"status": gate.get_status_display().lower()}
        )
    if gate.task.status != TaskStatus.AWAITING_APPROVAL:
        raise GateAlreadyDecided(_("the task is no longer waiting at this gate"))
    if seen_digest is not None and seen_digest != gate.args_digest:
        raise GateAlreadyDecided(_("the proposed action changed since you opened it; review again"))
    gate_check_decider(gate=gate, user=actor)
    if not kind.offers(choice):
        raise ReviewError(shown(kind.choice_refusal(choice)))
    return gate


def _people_check(*, actor: User, take_over: bool, via: Via) -> Callable[[Gate], None]:
    """What the people's room checks on the locked, open gate before any decision: the decider
    (role, separation of duties, the kind's groups) and the claim."""

    def check(gate: Gate) -> None:
        gate_check_decider(gate=gate, user=actor)
        claim_check_or_take_over(task_id=gate.task_id, actor=actor, take_over=take_over, via=via)

    return check


def _decided(
    gate_id: int,
    decision: GateDecision,
    *,
    actor: User,
    seen_digest: str | None,
    take_over: bool,
    via: Via,
) -> GateDecided:
    """Have the engine decide the gate, after the people's checks on the locked gate; its
    refusals become the review errors every channel answers. Caller holds the transaction (the
    decision log joins it)."""
    try:
        return engine.gate_decide(
            gate_id=gate_id,
            decision=decision,
            actor=actor,
            seen_digest=seen_digest,
            check=_people_check(actor=actor, take_over=take_over, via=via),
        )
    except GateNotOpen as exc:
        raise GateAlreadyDecided(exc.message) from None
    except DecisionRefused as exc:
        raise ReviewError(exc.message) from None


def _approved_logged(
    decided: GateDecided, *, actor: User, reason: str, action: str, via: Via, bulk: bool = False
) -> None:
    gate, approval = decided.gate, decided.approval or {}
    proposed = {"arguments": approval.get("arguments"), "proposed": decided.proposed}
    _gate_logged(
        gate,
        action=action,
        actor=actor,
        reason=reason,
        before_digest=decided.proposed_digest,
        after_digest=approval.get("args_digest", ""),
        detail={
            **(proposed if action == "reviews.gate.edited" else {}),
            **({"bulk": True} if bulk else {}),
            **approvals_detail(decided),
        }
        or None,
        via=via,
    )
    if not decided.closed:
        # The first of two approvals: the approver lets go of the item, so the second person
        # can take it without a takeover.
        Claim.objects.filter(task_id=gate.task_id, user_id=actor.pk).delete()


def _gate_logged(
    gate: Gate,
    *,
    action: str,
    actor: User | None,
    reason: str,
    before_digest: str = "",
    after_digest: str = "",
    detail: dict[str, Any] | None = None,
    via: Via,
) -> None:
    decision_record(
        action=action,
        actor=actor,
        task_id=gate.task_id,
        subject=f"gate {gate.pk}: {gate.tool}",
        before_digest=before_digest or gate.args_digest,
        after_digest=after_digest,
        reason=reason,
        policy_version_number=gate.policy_version_number,
        detail={"gate": gate.pk, **(detail or {})},
        via=via,
    )


def gate_timeout_logged(gate: Gate, *, what: str, reason: str, detail: dict[str, Any]) -> None:
    """Log what the sweeper did to an overdue gate (`escalated`, `expired`) as a decision with no
    actor. A hook of `agentops.engine.gates`, called inside the sweeper's transaction."""
    _gate_logged(
        gate,
        action=f"reviews.gate.{what}",
        actor=None,
        reason=reason,
        detail=detail,
        via=VIA_SYSTEM,
    )


def gate_approve(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    reason: str = "",
    take_over: bool = False,
    bulk: bool = False,
    via: Via = VIA_UNKNOWN,
) -> GateDecided:
    """Approve the gated action as proposed. The approval is bound to the arguments' digest and
    the policy version; the runner checks both again right before the call. `bulk` marks the
    decision as one of a bulk approval (reviewer-quality figures count them)."""
    with transaction.atomic():
        decided = _decided(
            gate_id,
            GateDecision(Choice.APPROVE, reason=reason),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _approved_logged(
            decided, actor=actor, reason=reason, action="reviews.gate.approved", via=via, bulk=bulk
        )
    return decided


def gate_edit_and_approve(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    arguments: Any,
    reason: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> GateDecided:
    """Approve with edited arguments. The edited action is evaluated again by the runner; a
    stricter verdict (another gate rule, or deny) opens a new gate or stops the task."""
    with transaction.atomic():
        decided = _decided(
            gate_id,
            GateDecision(Choice.EDIT, reason=reason, arguments=arguments),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _approved_logged(decided, actor=actor, reason=reason, action="reviews.gate.edited", via=via)
    return decided


def gate_reject(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    feedback: str,
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Reject: the feedback goes to the agent in its next model call, and it re-plans the step
    (the same action rejected again and again holds the task for a person instead)."""
    feedback = feedback.strip()
    if not feedback:
        raise ReviewError(_("say why: the agent re-plans from your feedback"))
    with transaction.atomic():
        decided = _decided(
            gate_id,
            GateDecision(Choice.REJECT, reason=feedback),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _gate_logged(
            decided.gate, action="reviews.gate.rejected", actor=actor, reason=feedback, via=via
        )


def gate_reject_and_stop(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    outcome: str,
    reason: str,
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Reject the gated action and end the task: `abort` keeps the effects made so far,
    `rollback` has a worker undo them (compensations in reverse order) and end it rolled back.
    Nothing of the gated action is sent. The gate, the task and the decision commit together."""
    reason = reason.strip()
    with transaction.atomic():
        decided = _decided(
            gate_id,
            GateDecision(Choice.STOP, reason=reason, outcome=outcome),
            actor=actor,
            seen_digest=seen_digest,
            take_over=take_over,
            via=via,
        )
        _gate_logged(
            decided.gate,
            action="reviews.gate.rejected_and_stopped",
            actor=actor,
            reason=reason,
            detail={"outcome": outcome},
            via=via,
        )


def gate_answer(
    *,
    gate_id: int,
    actor: User,
    seen_digest: str | None,
    text: str = "",
    choice: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> Gate:
    """Answer the agent's question at gate `gate_id` with `text` or one of its options
    (`choice`), log it, and return the gate as answered: the engine stores the answer with the
    step's approval and resumes the task. Only a gate whose kind takes an answer can be answered.

    Raises Gate.DoesNotExist, NotAllowed, HeldByOther, GateAlreadyDecided (answered, expired or
    changed first: a second submission of the same form lands here) and ReviewError (the answer
    does not fit the question, or the gate asks for approval, not an answer)."""
    with transaction.atomic():
        try:
            decided = question_answer(
                gate_id=gate_id,
                actor=actor,
                seen_digest=seen_digest,
                text=text,
                choice=choice,
                check=_people_check(actor=actor, take_over=take_over, via=via),
            )
        except GateNotOpen as exc:
            raise GateAlreadyDecided(exc.message) from None
        except DecisionRefused as exc:
            raise ReviewError(exc.message) from None
        gate, answer = decided.gate, (decided.approval or {})["answer"]
        asked = question_of(gate.arguments)
        decision_record(
            action="reviews.question.answered",
            actor=actor,
            task_id=gate.task_id,
            subject=f"question {gate.pk}: {asked.question}",
            before_digest=gate.args_digest,
            after_digest=gate.args_digest,
            reason=answer["answer"],
            policy_version_number=gate.policy_version_number,
            detail={
                "gate": gate.pk,
                "step": gate.step.ordinal,
                "question": redacted_cut(asked.question, 500),
                "options": list(asked.options),
                "answer": answer["answer"],
                "chosen": answer["chosen"],
            },
            via=via,
        )
    return Gate.objects.select_related("decided_by").get(pk=gate_id)


def gate_decide(
    *,
    gate_id: int,
    choice: Choice,
    actor: User,
    seen_digest: str | None,
    reason: str = "",
    arguments: Any = None,
    outcome: str = "",
    option: str = "",
    take_over: bool = False,
    via: Via = VIA_UNKNOWN,
) -> None:
    """Decide gate `gate_id` with `choice`, for a channel that carries the choice as data (a
    button, a signed link): the one decision function of that choice, with `reason` as its
    reason (a rejection's feedback, an answer's text), `arguments` an edit's, `outcome` a stop's
    and `option` the chosen option of an answer. Raises what that function raises."""
    common: dict[str, Any] = {
        "gate_id": gate_id,
        "actor": actor,
        "seen_digest": seen_digest,
        "take_over": take_over,
        "via": via,
    }
    if choice == Choice.APPROVE:
        gate_approve(reason=reason, **common)
    elif choice == Choice.EDIT:
        gate_edit_and_approve(arguments=arguments, reason=reason, **common)
    elif choice == Choice.REJECT:
        gate_reject(feedback=reason, **common)
    elif choice == Choice.STOP:
        gate_reject_and_stop(outcome=outcome, reason=reason, **common)
    else:
        gate_answer(text=reason, choice=option, **common)


@dataclass(frozen=True)
class BulkResult:
    """What happened to one gate of a bulk approval: approved, approved as the first of two
    (`message` says who must approve next), already decided, not allowed."""

    gate_id: int
    outcome: str
    message: str = ""

    @property
    def outcome_label(self) -> str:
        """The outcome in the reader's words (`outcome` stays the code a page styles by)."""
        counted = _COUNTED.fullmatch(self.outcome)
        if counted:
            return _("%(given)s of %(required)s approvals") % {
                "given": counted.group(1),
                "required": counted.group(2),
            }
        return _(BULK_OUTCOMES[self.outcome]) if self.outcome in BULK_OUTCOMES else self.outcome


# A bulk approval's outcomes for one gate, as `BulkResult.outcome_label` words them; an approval
# that counts towards more is "<given> of <required> approvals" (`bulk_outcome`).
BULK_OUTCOMES = {
    "approved": gettext_noop("approved"),
    "not found": gettext_noop("not found"),
    "already decided": gettext_noop("already decided"),
    "not allowed": gettext_noop("not allowed"),
    "held by someone else": gettext_noop("held by someone else"),
}
_COUNTED = re.compile(r"(\d+) of (\d+) approvals")


def gates_bulk_approve(
    *,
    selection: list[tuple[int, str | None]],
    actor: User,
    reason: str = "",
    via: Via = VIA_UNKNOWN,
) -> list[BulkResult]:
    """Approve several gates that share one rule and policy version, one by one.

    `selection` pairs each gate id with the digest the person saw. A selection that mixes rules
    or versions is refused as a whole (ReviewError); otherwise each gate is decided in its own
    transaction by `gate_approve`, so one refusal does not undo the others.
    """
    if not selection:
        raise ReviewError(_("select at least one gate"))
    ids = [gate_id for gate_id, _digest in selection]
    found = {
        row["pk"]: (row["rule"], row["policy_version_id"], row["policy_version_number"])
        for row in Gate.objects.filter(pk__in=ids).values(
            "pk", "rule", "policy_version_id", "policy_version_number"
        )
    }
    tiers = {(rule, version) for rule, version, _number in found.values()}
    if len(tiers) > 1:
        names = ", ".join(sorted({f"{rule!r} (v{number})" for rule, _id, number in found.values()}))
        raise ReviewError(
            _(
                "bulk approval needs gates of one rule and policy version; this selection "
                "mixes %(names)s"
            )
            % {"names": names}
        )
    results = []
    for gate_id, seen_digest in selection:
        if gate_id not in found:
            results.append(BulkResult(gate_id, "not found", _("no such gate")))
            continue
        try:
            decided = gate_approve(
                gate_id=gate_id,
                actor=actor,
                seen_digest=seen_digest,
                reason=reason,
                bulk=True,
                via=via,
            )
        except GateAlreadyDecided as exc:
            results.append(BulkResult(gate_id, "already decided", str(exc)))
        except NotAllowed as exc:
            results.append(BulkResult(gate_id, "not allowed", str(exc)))
        except HeldByOther as exc:
            # Bulk approval never takes an item over: that is asked for one gate at a time.
            results.append(BulkResult(gate_id, "held by someone else", str(exc)))
        else:
            results.append(BulkResult(gate_id, *bulk_outcome(decided)))
    return results
