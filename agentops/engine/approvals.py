"""Approval kinds: who, and how many people, must approve a gate before its action runs.

A kind is a small strategy that answers three questions about a gate: is it still open for a
decision (`is_open`), may this person decide it (`may_decide`: a refusal, or None), and do the
approvals given so far satisfy it (`is_satisfied`). A gate records its kind by name
(`Gate.approval_kind`); the gate decision (`agentops.engine.decisions.gate_decide`), the people's
role check (`reviews.roles.gate_decider_refusal`) and the gate panel ask the gate's kind, never
its name, so a new kind is a class registered here (and a migration when it keeps state of its
own), not an edit of each place that decides gates.

Three kinds: `OneApprover`, one person of the approver group decides; `Question`
(`engine/questions.py`: an agent's question, answered by one person, never approved); and
`TwoApprovers` (four eyes), which a policy rule asks for with `approvals_required = 2`: two
different people approve the same arguments, one for the approver group and one for
`Gate.second_approver_group` (empty: the approver group again), in either order. Each
approval is kept on the gate (`Gate.approvals`, with the group it counts for), the one that
closes it too, so a decided gate lists both approvers. An edit between
them starts over (the edited arguments become the gate's proposal and the editor's approval the
first one of them), and a rejection by either ends it as any rejection does. The task's starter
never decides (`reviews.roles`), and nobody's approval counts twice (`person_refusal`, asked of
superusers too, and by the engine itself before it counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib.auth.models import Group

from agentops.models import Gate
from agentops.states import GateStatus
from policies.engine import GateSettings
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


class Choice(StrEnum):
    """What a person may decide on a gate; its approval kind says which it offers
    (`ApprovalKind.offers`)."""

    APPROVE = "approve"
    EDIT = "edit"  # approve with edited arguments
    REJECT = "reject"  # the agent re-plans the step from the feedback
    STOP = "stop"  # reject and end the task (`outcome`: abort or rollback)
    ANSWER = "answer"  # answer an agent's question (`question_answer`), which resumes the task


# What a gate that asks for approval offers: approve as proposed or edited, reject, or stop.
APPROVAL_CHOICES = frozenset({Choice.APPROVE, Choice.EDIT, Choice.REJECT, Choice.STOP})


@dataclass(frozen=True)
class Approval:
    """One person's approval of a gate's action: who, the arguments' digest they approved,
    when (ISO 8601), the group it counts for and, when they edited them, the arguments."""

    by: str
    user_id: int | None
    args_digest: str
    arguments: dict[str, Any] | None = None
    at: str = ""
    group: str = ""

    def as_dict(self) -> dict[str, Any]:
        """As kept on the gate (`Gate.approvals`); the arguments are the gate's own."""
        return {
            "by": self.by,
            "user_id": self.user_id,
            "args_digest": self.args_digest,
            "at": self.at,
            "group": self.group,
        }

    @classmethod
    def from_dict(cls, kept: dict[str, Any]) -> Approval:
        return cls(
            by=str(kept.get("by", "")),
            user_id=kept.get("user_id"),
            args_digest=str(kept.get("args_digest", "")),
            at=str(kept.get("at", "")),
            group=str(kept.get("group", "")),
        )


class ApprovalKind:
    """The strategy of one approval kind. Subclasses set `name` (stored on the gate) and
    `label`, and answer `may_decide` and `is_satisfied`; a kind that needs more than one
    approval (`required`) also keeps them (`approvals_of`, `approval_record`)."""

    name: ClassVar[str]
    label: ClassVar[str]
    # How many different people's approvals let the action run (the gate's "1 of 2").
    required: ClassVar[int] = 1
    # The decisions this kind offers; every channel asks (`offers`) instead of naming kinds.
    choices: ClassVar[frozenset[Choice]] = APPROVAL_CHOICES

    def offers(self, choice: Choice) -> bool:
        """Whether a person may decide a gate of this kind with `choice` (the gate decision
        refuses any other, and channels offer only these)."""
        return choice in self.choices

    @property
    def takes_answer(self) -> bool:
        """Whether a gate of this kind is decided by answering it (an agent's question): a
        channel sends the person to the question's page or form, never to Approve."""
        return self.offers(Choice.ANSWER)

    def choice_refusal(self, choice: Choice) -> str:
        """Why a gate of this kind cannot be decided with `choice` (one it does not offer)."""
        return Phrase(
            gettext_noop("a gate that asks for %(kind)s cannot be decided with %(choice)s"),
            {"kind": self.label, "choice": choice.value},
        )

    def is_open(self, gate: Gate) -> bool:
        """Whether the gate still waits for a decision."""
        return gate.status == GateStatus.OPEN

    def may_decide(
        self, gate: Gate, *, user: User | AnonymousUser, groups: frozenset[str]
    ) -> str | None:
        """Why this kind refuses `user` (who belongs to `groups`), or None. The people's room
        checks the role and the separation of duties before it asks the kind."""
        raise NotImplementedError

    def person_refusal(self, gate: Gate, *, user: User | AnonymousUser) -> str | None:
        """Why this person may not add an approval whatever their groups (superusers too): one
        person's approval counts once."""
        if any(a.user_id == user.pk for a in self.approvals_of(gate)):
            return Phrase(
                gettext_noop("you approved this already; a second person must approve too")
            )
        return None

    def waiting_for(self, gate: Gate) -> tuple[str, ...]:
        """The groups whose member's approval the gate waits for now (any one of them)."""
        return (gate.approver_group,)

    def approvals_of(self, gate: Gate) -> tuple[Approval, ...]:
        """The approvals the gate already holds (none for a kind that one approval closes)."""
        return ()

    def approval_record(self, gate: Gate, approval: Approval) -> None:
        """Keep an approval on the gate (the one that satisfies the kind too, so a decided
        gate lists every approver). Caller holds the gate's lock."""
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
        return Phrase(
            gettext_noop("only members of %(group)s may decide this gate"),
            {"group": repr(gate.approver_group)},
        )

    def is_satisfied(self, gate: Gate, approvals: Sequence[Approval]) -> bool:
        return len(approvals) >= 1


class TwoApprovers(ApprovalKind):
    """Four eyes: two different people approve the same arguments, one for the approver group
    and one for the second group (`Gate.second_approver_group`; empty: the approver group
    again), in either order. The approvals are kept on the gate; an edit replaces the
    gate's proposal and starts the count over with the editor's approval."""

    name = "two_approvers"
    label = "two approvers"
    required = 2

    def _groups(self, gate: Gate) -> list[str]:
        return [gate.approver_group, gate.second_approver_group or gate.approver_group]

    def waiting_for(self, gate: Gate) -> tuple[str, ...]:
        remaining = self._groups(gate)
        for approval in self.approvals_of(gate):
            if approval.group in remaining:
                remaining.remove(approval.group)
        return tuple(dict.fromkeys(remaining))

    def may_decide(
        self, gate: Gate, *, user: User | AnonymousUser, groups: frozenset[str]
    ) -> str | None:
        refusal = self.person_refusal(gate, user=user)
        if refusal is not None:
            return refusal
        waiting = self.waiting_for(gate)
        if getattr(user, "is_superuser", False) or groups.intersection(waiting):
            return None
        names = " or ".join(repr(group) for group in waiting)
        if self.approvals_of(gate):
            return Phrase(
                gettext_noop("only members of %(groups)s may decide the second approval"),
                {"groups": names},
            )
        return Phrase(
            gettext_noop("only members of %(groups)s may decide this gate"), {"groups": names}
        )

    def approvals_of(self, gate: Gate) -> tuple[Approval, ...]:
        return tuple(
            Approval.from_dict(kept)
            for kept in gate.approvals or ()
            if kept.get("args_digest") == gate.args_digest
        )

    def approval_record(self, gate: Gate, approval: Approval) -> None:
        if approval.arguments is not None and approval.args_digest != gate.args_digest:
            # An edit: the edited arguments are what is on the table now, and the editor's
            # approval is the first of them (any given before was for other arguments).
            counted = self._counted(approval, self._groups(gate))
            gate.arguments, gate.args_digest, gate.edited = (
                approval.arguments,
                approval.args_digest,
                True,
            )
            gate.approvals = [counted.as_dict()]
            Gate.objects.filter(pk=gate.pk).update(
                arguments=gate.arguments,
                args_digest=gate.args_digest,
                edited=True,
                approvals=gate.approvals,
            )
            return
        counted = self._counted(approval, list(self.waiting_for(gate)))
        gate.approvals = [*(a.as_dict() for a in self.approvals_of(gate)), counted.as_dict()]
        Gate.objects.filter(pk=gate.pk).update(approvals=gate.approvals)

    def _counted(self, approval: Approval, waiting: Sequence[str]) -> Approval:
        """The approval as kept: without the arguments (the gate's own), with its group."""
        return Approval(
            by=approval.by,
            user_id=approval.user_id,
            args_digest=approval.args_digest,
            at=approval.at,
            group=self._group_of(approval.user_id, waiting),
        )

    def _group_of(self, user_id: int | None, waiting: Sequence[str]) -> str:
        """The group still waiting that the approver's approval counts for: the second group
        when they belong to it (usually the narrower one, so the approver group, usually the
        wider, is left to the next person), else the approver group (a superuser in neither
        counts for the approver group)."""
        if user_id is None:
            return waiting[0] if waiting else ""
        held = set(
            Group.objects.filter(user__pk=user_id, name__in=waiting).values_list("name", flat=True)
        )
        return next(
            (group for group in reversed(waiting) if group in held), waiting[0] if waiting else ""
        )

    def is_satisfied(self, gate: Gate, approvals: Sequence[Approval]) -> bool:
        latest = approvals[-1].args_digest if approvals else None
        people = {a.user_id for a in approvals if a.args_digest == latest}
        return len(people) >= self.required


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


def approval_kinds_offering(choice: Choice) -> tuple[str, ...]:
    """The names of the registered kinds that offer `choice` (to filter gates by what they
    offer, as the question lists do with ANSWER)."""
    return tuple(name for name, kind in APPROVAL_KINDS.items() if kind.offers(choice))


def approval_kind_for(settings: GateSettings) -> str:
    """The kind of a gate opened under `settings`: the kind they name (an agent's question),
    else two people when its rule asks for two, else one."""
    if settings.approval_kind:
        return settings.approval_kind
    return TwoApprovers.name if settings.approvals_required >= 2 else OneApprover.name


approval_kind_register(OneApprover())
approval_kind_register(TwoApprovers())
