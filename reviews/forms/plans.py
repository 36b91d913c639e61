"""The form of one change to a stopped task's plan (preview, then apply what was previewed)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from agentops.engine import PlanEdit
from reviews.forms._common import DIGEST, NOTE_MAX


class PlanRepairForm(forms.Form):
    """One change to a stopped task's plan; steps are numbered from 1, as the pages show them.

    `intent` says whether the person asks for the preview or applies the change they previewed
    (bound to the digest of the plan they saw)."""

    OPS = [
        ("instruct", _("Change a step's instruction")),
        ("insert", _("Insert a step")),
        ("remove", _("Remove a step not yet started")),
        ("strategy", _("Switch to another strategy")),
    ]
    op = forms.ChoiceField(choices=OPS, label=_("Change"))
    step = forms.IntegerField(required=False, min_value=1, max_value=10_000, label=_("Step number"))
    title = forms.CharField(required=False, max_length=200, label=_("New step's title"))
    tool = forms.CharField(required=False, max_length=100, label=_("New step's tool"))
    instruction = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Instruction"),
        help_text=_("What the model is told to do in the step, beyond its title."),
    )
    depends_on = forms.CharField(
        required=False, max_length=200, label=_("Depends on steps"), help_text=_("e.g. 1, 2")
    )
    strategy = forms.CharField(required=False, max_length=100, label=_("Strategy"))
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Reason"),
        help_text=_("Recorded with the change in the decision log."),
    )
    then_retry = forms.BooleanField(required=False, label=_("Retry the task under the new plan"))
    seen_digest = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)
    take_over = forms.BooleanField(required=False, label=_("Take this over and decide it myself"))
    intent = forms.ChoiceField(choices=[("preview", _("Preview")), ("apply", _("Apply"))])

    def clean_depends_on(self) -> tuple[int, ...]:
        text: str = self.cleaned_data["depends_on"]
        numbers = [part.strip() for part in text.replace(";", ",").split(",") if part.strip()]
        if any(not part.isdigit() or not 1 <= int(part) <= 10_000 for part in numbers):
            raise ValidationError(_("Step numbers separated by commas, e.g. 1, 2."))
        return tuple(int(part) - 1 for part in numbers)

    def clean_seen_digest(self) -> str:
        value: str = self.cleaned_data["seen_digest"]
        if value and not DIGEST.fullmatch(value):
            raise ValidationError(_("The form is missing the digest of the plan you saw; reload."))
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        op = data.get("op")
        if op in ("instruct", "insert", "remove") and not data.get("step"):
            self.add_error("step", _("Say which step (its number)."))
        if op == "strategy" and not data.get("strategy"):
            self.add_error("strategy", _("Choose a strategy."))
        if data.get("intent") == "apply" and not data.get("seen_digest"):
            raise ValidationError(_("Preview the change first: it is applied to the plan you saw."))
        return data

    def edit(self) -> PlanEdit:
        """The engine's `PlanEdit` for the cleaned data."""
        data = self.cleaned_data
        step = data.get("step")
        return PlanEdit(
            op=data["op"],
            ordinal=step - 1 if step else None,
            title=data.get("title") or "",
            tool=data.get("tool") or None,
            instruction=data.get("instruction") or "",
            depends_on=data.get("depends_on") or (),
            strategy=data.get("strategy") or "",
        )
