"""What the people's room says about approvals a gate's kind counts (four eyes): the decision
log's detail of an approval ("1 of 2", who approved before) and a bulk approval's outcome for
one gate. The counting itself is the engine's (`agentops.engine.TwoApprovers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

if TYPE_CHECKING:
    from agentops.engine import GateDecided


def approvals_detail(decided: GateDecided) -> dict[str, Any]:
    """For a kind that wants more than one approval: which one this is, of how many, and who
    gave the others; an edit that replaced the arguments says the count started over."""
    if decided.required <= 1 or decided.approval is None:
        return {}
    detail: dict[str, Any] = {
        "approval": len(decided.approvals),
        "of": decided.required,
        "approved_by": [a.by for a in decided.approvals],
    }
    if decided.proposed_digest and decided.proposed_digest != decided.approval["args_digest"]:
        detail["started_over"] = True
    return detail


def bulk_outcome(decided: GateDecided) -> tuple[str, str]:
    """One gate's outcome in a bulk approval and its message: approved, or counted as one of
    the approvals its kind wants (the gate stays open for the next person)."""
    if decided.closed:
        return "approved", ""
    return (
        f"{len(decided.approvals)} of {decided.required} approvals",
        _("approved by you; a second person must approve too"),
    )
