"""The decision log's filters: the action families, the user, the task and the dates."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from reviews.forms._common import DateRangeForm
from reviews.selectors import DecisionFilters

DECISION_ACTIONS = [
    ("", _("All actions")),
    (
        _("Gates"),
        [
            ("reviews.gate", _("every gate decision")),
            ("reviews.gate.approved", _("approved")),
            ("reviews.gate.edited", _("edited and approved")),
            ("reviews.gate.rejected", _("rejected")),
            ("reviews.gate.rejected_and_stopped", _("rejected and stopped")),
            ("reviews.gate.expired", _("expired")),
            ("reviews.gate.escalated", _("escalated")),
        ],
    ),
    (
        _("Stopped tasks"),
        [
            ("reviews.intervention", _("every intervention")),
            ("reviews.intervention.retry", _("retry")),
            ("reviews.intervention.skip", _("skip")),
            ("reviews.intervention.rollback", _("rollback")),
            ("reviews.intervention.abort", _("abort")),
            ("reviews.plan.repaired", _("plan repaired")),
            ("reviews.ledger.confirmed", _("unknown call confirmed")),
        ],
    ),
    (
        _("Scopes and questions"),
        [
            ("reviews.scope", _("every scope grant or revocation")),
            ("reviews.scope.granted", _("scope granted")),
            ("reviews.scope.revoked", _("grant revoked")),
            ("reviews.question.answered", _("agent's question answered")),
        ],
    ),
    (
        _("Tasks"),
        [
            ("reviews.task", _("every pause, resume, cancel or change")),
            ("reviews.task.paused", _("paused")),
            ("reviews.task.resumed", _("resumed")),
            ("reviews.task.cancelled", _("cancelled")),
            ("reviews.task.modified", _("budgets or input changed")),
            ("reviews.task.restored", _("restored from its log")),
        ],
    ),
    (
        _("Fleet stops"),
        [
            ("reviews.fleet", _("every stop or resume")),
            ("reviews.fleet.stopped", _("stopped")),
            ("reviews.fleet.resumed", _("resumed")),
        ],
    ),
    (
        _("Claims"),
        [
            ("reviews.claim", _("every assignment or takeover")),
            ("reviews.claim.assigned", _("assigned")),
            ("reviews.claim.taken_over", _("taken over")),
        ],
    ),
    (
        _("Audit"),
        [
            ("reviews.audit", _("every audit verdict")),
            ("reviews.audit.ok", _("marked ok")),
            ("reviews.audit.flagged", _("flagged")),
        ],
    ),
    (
        _("Rubric reviews"),
        [
            ("reviews.rubric", _("every rubric decision")),
            ("reviews.rubric.answered", _("answered")),
            ("reviews.rubric.adjudicated", _("adjudicated")),
            ("reviews.rubric.created", _("rubric defined")),
            ("reviews.rubric.attached", _("rubric attached")),
        ],
    ),
    (
        _("Audit batches"),
        [
            ("reviews.reservation", _("every batch taken or given back")),
            ("reviews.reservation.taken", _("taken")),
            ("reviews.reservation.released", _("given back")),
        ],
    ),
    (
        _("Policies"),
        [
            ("policies.version", _("every publish or revert")),
            ("policies.version.published", _("published")),
            ("policies.version.reverted", _("reverted")),
        ],
    ),
]


class DecisionFilterForm(DateRangeForm):
    action = forms.ChoiceField(required=False, choices=DECISION_ACTIONS, label=_("Action"))
    user = forms.CharField(required=False, max_length=150, label=_("User"))
    task = forms.IntegerField(required=False, min_value=1, label=_("Task"))
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
