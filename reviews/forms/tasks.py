"""The task controls' forms: pause, resume, cancel, and a change of budgets or input."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from agentops.plumbing.web import JSONObjectField
from reviews.forms._common import ARGUMENTS_MAX, NOTE_MAX


class TaskControlForm(forms.Form):
    # Cancel ends the task: it needs this box ticked (the form states what stays done).
    confirm = forms.BooleanField(required=False)
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 1, "translate": "no"}),
        label=_("Reason (optional)"),
    )
    next = forms.CharField(required=False, widget=forms.HiddenInput)


class TaskModifyForm(forms.Form):
    token_budget = forms.IntegerField(required=False, min_value=1, label=_("Token budget"))
    cost_budget = forms.DecimalField(
        required=False, min_value=0, max_digits=12, decimal_places=6, label=_("Cost budget")
    )
    wall_time_budget_seconds = forms.IntegerField(
        required=False, min_value=1, label=_("Wall-time budget (seconds)")
    )
    input = JSONObjectField(
        noun="input changes",
        plural=True,
        example='{"order_id": "A1002"}',
        max_chars=ARGUMENTS_MAX,
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 3, "spellcheck": "false", "class": "mono", "translate": "no"}
        ),
        label=_("Input changes (JSON object, editable fields only)"),
    )
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.TextInput(attrs={"translate": "no"}),
        label=_("Reason (optional)"),
    )

    def budgets(self) -> dict[str, Any]:
        """Only the budgets the person filled in (an empty field leaves the budget alone)."""
        names = ("token_budget", "cost_budget", "wall_time_budget_seconds")
        return {n: self.cleaned_data[n] for n in names if self.cleaned_data.get(n) is not None}
