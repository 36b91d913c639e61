"""Approval kinds: who, and how many people, must approve a gate before its action runs.

A kind is a small strategy that answers three questions about a gate: is it still open for a
decision (`is_open`), may this person decide it (`may_decide`: a refusal, or None), and do the
approvals given so far satisfy it (`is_satisfied`). A gate records its kind by name
(`Gate.approval_kind`); the gate decision (`agentops.engine.decisions.gate_decide`), the people's
role check (`reviews.roles.gate_decider_refusal`) and the gate panel ask the gate's kind, never
its name, so a new kind is a class registered here (and a migration when it keeps state of its
own), not an edit of each place that decides gates.

The kinds so far: `OneApprover` (one person of the approver group decides) and `Question`
(`engine/questions.py`: an agent's question, answered by one person, never approved). A two-person
approval (issue #24) is the next class: `may_decide` refuses the person who already approved,
`approvals_of` / `approval_record` keep the first approval (a column on the gate, its migration),
and `is_satisfied` wants two distinct approvers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from agentops.models import Gate
from agentops.states import GateStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


@dataclass(frozen=True)
class Approval:
    """One person's approval of a gate's action: who, and the arguments' digest they approved."""

    by: str
    user_id: int | None
    args_digest: str


class ApprovalKind:
    """The strategy of one approval kind. Subclasses set `name` (stored on the gate) and
    `label`, and answer `may_decide` and `is_satisfied`; a kind that needs more than one
    approval also keeps them (`approvals_of`, `approval_record`)."""

    name: ClassVar[str]
    label: ClassVar[str]

    def is_open(self, gate: Gate) -> bool:
        """Whether the gate still waits for a decision."""
        return gate.status == GateStatus.OPEN

    def may_decide(
        self, gate: Gate, *, user: User | AnonymousUser, groups: frozenset[str]
    ) -> str | None:
        """Why this kind refuses `user` (who belongs to `groups`), or None. The people's room
        checks the role and the separation of duties before it asks the kind."""
        raise NotImplementedError

    def approvals_of(self, gate: Gate) -> tuple[Approval, ...]:
        """The approvals the gate already holds (none for a kind that one approval closes)."""
        return ()

    def approval_record(self, gate: Gate, approval: Approval) -> None:
        """Keep an approval that did not satisfy the kind yet. Caller holds the gate's lock."""
        raise NotImplementedError(f"the approval kind {self.name!r} keeps no approvals")

    def is_satisfied(self, gate: Gate, approvals: Sequence[Approval]) -> bool:
        """Whether `approvals` (the kept ones and the new one) let the gated action run."""
        raise NotImplementedError

    def timeout_feedback(self, gate: Gate, waited: int) -> str:
        """What the agent is told when nobody decided the gate in time (it re-plans the step)."""
        return (
            f"Nobody approved {gate.tool} within {waited} s, so it was rejected. "
            "Propose a safer action or stop."
        )


class OneApprover(ApprovalKind):
    """One person of the gate's approver group decides (a superuser may decide any gate: the
    people's room lets them through before it asks the kind)."""

    name = "one_approver"
    label = "one approver"

    def may_decide(
        self, gate: Gate, *, user: User | AnonymousUser, groups: frozenset[str]
    ) -> str | None:
        if gate.approver_group in groups:
            return None
        return f"only members of {gate.approver_group!r} may decide this gate"

    def is_satisfied(self, gate: Gate, approvals: Sequence[Approval]) -> bool:
        return len(approvals) >= 1


APPROVAL_KINDS: dict[str, ApprovalKind] = {}


def approval_kind_register(kind: ApprovalKind) -> ApprovalKind:
    """Make `kind` known by its name (a gate names its kind; the name must be unique)."""
    known = APPROVAL_KINDS.setdefault(kind.name, kind)
    if known is not kind and type(known) is not type(kind):
        raise ValueError(f"approval kind {kind.name!r} is already registered")
    return kind


def approval_kind_of(gate: Gate) -> ApprovalKind:
    """The strategy of `gate`'s approval kind; LookupError for a kind no class is registered for."""
    try:
        return APPROVAL_KINDS[gate.approval_kind]
    except KeyError:
        raise LookupError(
            f"gate {gate.pk} has approval kind {gate.approval_kind!r}, which no "
            "class is registered for"
        ) from None


approval_kind_register(OneApprover())
