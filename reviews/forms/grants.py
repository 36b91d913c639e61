"""The forms of scope grants: grant the scope a service refused (to the task or its agent, for
one of the offered durations, with a reason) and revoke a grant (with a reason)."""

from __future__ import annotations

from django import forms

from agentops.engine import GRANT_DURATIONS
from reviews.forms._common import NOTE_MAX


class ScopeGrantForm(forms.Form):
    scope = forms.CharField(max_length=100, widget=forms.HiddenInput)
    to = forms.ChoiceField(
        choices=[("task", "This task only"), ("agent", "Every task of this agent")],
        initial="task",
        widget=forms.RadioSelect,
        label="Grant to",
    )
    minutes = forms.TypedChoiceField(
        choices=[(str(m), label) for m, label in GRANT_DURATIONS],
        coerce=int,
        initial="60",
        label="For",
        help_text="The grant expires by itself; you can revoke it sooner from the task page.",
    )
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Why grant it",
        help_text="Required: recorded with the grant in the decision log.",
        error_messages={"required": "Say why the scope is granted."},
    )
    take_over = forms.BooleanField(required=False, label="Take this over and decide it myself")

    def clean_reason(self) -> str:
        reason = str(self.cleaned_data["reason"]).strip()
        if not reason:
            raise forms.ValidationError("Say why the scope is granted.")
        return reason


class ScopeRevokeForm(forms.Form):
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 1}),
        label="Reason",
        error_messages={"required": "Say why the grant is revoked."},
    )

    def clean_reason(self) -> str:
        reason = str(self.cleaned_data["reason"]).strip()
        if not reason:
            raise forms.ValidationError("Say why the grant is revoked.")
        return reason
