"""How far a gate's approvals have come (four eyes): "1 of 2", who approved and when, and whose
approval it waits for now. Read from the gate's kind (`agentops.engine.approval_kind_of`); a
kind that one approval closes has no progress to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import pgettext

from agentops.engine import Approval, approval_kind_of
from policies.phrases import kept

if TYPE_CHECKING:
    from agentops.models import Gate


@dataclass(frozen=True)
class ApprovalProgress:
    given: tuple[Approval, ...]
    required: int
    # The groups any one of which may give the next approval.
    waiting: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{len(self.given)} of {self.required}"

    @property
    def waiting_for(self) -> str:
        """The groups in English, one or the other ("finance leads or operators")."""
        return " or ".join(self.waiting)

    @property
    def waiting_html(self) -> SafeString:
        """The groups for a page: each name kept as written, "or" in the reader's language."""
        separator = escape(pgettext("any one of the groups", " or "))
        return mark_safe(separator.join(kept(group) for group in self.waiting))

    @property
    def names(self) -> str:
        return ", ".join(a.by for a in self.given)

    @property
    def entries(self) -> list[tuple[str, datetime | None]]:
        """Who approved, and when (None when the time was not kept)."""
        return [(a.by, _when(a.at)) for a in self.given]


def _when(at: str) -> datetime | None:
    try:
        return datetime.fromisoformat(at)
    except ValueError:
        return None


def gate_approval_progress(gate: Gate) -> ApprovalProgress | None:
    """The approvals an open or decided gate of a many-approver kind holds; None for one."""
    kind = approval_kind_of(gate)
    if kind.required <= 1:
        return None
    return ApprovalProgress(
        given=kind.approvals_of(gate),
        required=kind.required,
        waiting=kind.waiting_for(gate),
    )
