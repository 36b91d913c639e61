"""The decision log's filters: the action families, the user, the task and the dates."""

from __future__ import annotations

from django import forms

from reviews.forms._common import DateRangeForm
from reviews.selectors import DecisionFilters

DECISION_ACTIONS = [
    ("", "All actions"),
    (
        "Gates",
        [
            ("reviews.gate", "every gate decision"),
            ("reviews.gate.approved", "approved"),
            ("reviews.gate.edited", "edited and approved"),
            ("reviews.gate.rejected", "rejected"),
            ("reviews.gate.rejected_and_stopped", "rejected and stopped"),
            ("reviews.gate.expired", "expired"),
            ("reviews.gate.escalated", "escalated"),
        ],
    ),
    (
        "Stopped tasks",
        [
            ("reviews.intervention", "every intervention"),
            ("reviews.intervention.retry", "retry"),
            ("reviews.intervention.skip", "skip"),
            ("reviews.intervention.rollback", "rollback"),
            ("reviews.intervention.abort", "abort"),
            ("reviews.plan.repaired", "plan repaired"),
            ("reviews.ledger.confirmed", "unknown call confirmed"),
        ],
    ),
    (
        "Scopes and questions",
        [
            ("reviews.scope", "every scope grant or revocation"),
            ("reviews.scope.granted", "scope granted"),
            ("reviews.scope.revoked", "grant revoked"),
            ("reviews.question.answered", "agent's question answered"),
        ],
    ),
    (
        "Tasks",
        [
            ("reviews.task", "every pause, resume, cancel or change"),
            ("reviews.task.paused", "paused"),
            ("reviews.task.resumed", "resumed"),
            ("reviews.task.cancelled", "cancelled"),
            ("reviews.task.modified", "budgets or input changed"),
            ("reviews.task.restored", "restored from its log"),
        ],
    ),
    (
        "Fleet stops",
        [
            ("reviews.fleet", "every stop or resume"),
            ("reviews.fleet.stopped", "stopped"),
            ("reviews.fleet.resumed", "resumed"),
        ],
    ),
    (
        "Claims",
        [
            ("reviews.claim", "every assignment or takeover"),
            ("reviews.claim.assigned", "assigned"),
            ("reviews.claim.taken_over", "taken over"),
        ],
    ),
    (
        "Audit",
        [
            ("reviews.audit", "every audit verdict"),
            ("reviews.audit.ok", "marked ok"),
            ("reviews.audit.flagged", "flagged"),
        ],
    ),
    (
        "Rubric reviews",
        [
            ("reviews.rubric", "every rubric decision"),
            ("reviews.rubric.answered", "answered"),
            ("reviews.rubric.adjudicated", "adjudicated"),
            ("reviews.rubric.created", "rubric defined"),
            ("reviews.rubric.attached", "rubric attached"),
        ],
    ),
    (
        "Audit batches",
        [
            ("reviews.reservation", "every batch taken or given back"),
            ("reviews.reservation.taken", "taken"),
            ("reviews.reservation.released", "given back"),
        ],
    ),
    (
        "Policies",
        [
            ("policies.version", "every publish or revert"),
            ("policies.version.published", "published"),
            ("policies.version.reverted", "reverted"),
        ],
    ),
]


class DecisionFilterForm(DateRangeForm):
    action = forms.ChoiceField(required=False, choices=DECISION_ACTIONS, label="Action")
    user = forms.CharField(required=False, max_length=150, label="User")
    task = forms.IntegerField(required=False, min_value=1, label="Task")
    field_order = ["action", "user", "task", "date_from", "date_to"]

    def filters(self) -> DecisionFilters:
        self.is_valid()
        data = self.cleaned_data
        return DecisionFilters(
            action=data.get("action") or "",
            user=(data.get("user") or "").strip(),
            task_id=data.get("task"),
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
        )
