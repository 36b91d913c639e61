"""The forms of scope grants: grant the scope a service refused (to the task or its agent, for
one of the offered durations, with a reason) and revoke a grant (with a reason)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from agentops.engine import GRANT_DURATIONS
from reviews.forms._common import NOTE_MAX


class ScopeGrantForm(forms.Form):
    scope = forms.CharField(max_length=100, widget=forms.HiddenInput)
    to = forms.ChoiceField(
        choices=[("task", _("This task only")), ("agent", _("Every task of this agent"))],
        initial="task",
        widget=forms.RadioSelect,
        label=_("Grant to"),
    )
    minutes = forms.TypedChoiceField(
        choices=[(str(m), label) for m, label in GRANT_DURATIONS],
        coerce=int,
        initial="60",
        label=_("For"),
        help_text=_("The grant expires by itself; you can revoke it sooner from the task page."),
    )
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Why grant it"),
        help_text=_("Required: recorded with the grant in the decision log."),
        error_messages={"required": _("Say why the scope is granted.")},
    )
    take_over = forms.BooleanField(required=False, label=_("Take this over and decide it myself"))

    def clean_reason(self) -> str:
        reason = str(self.cleaned_data["reason"]).strip()
        if not reason:
            raise forms.ValidationError(_("Say why the scope is granted."))
        return reason


class ScopeRevokeForm(forms.Form):
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 1, "translate": "no"}),
        label=_("Reason"),
        error_messages={"required": _("Say why the grant is revoked.")},
    )

    def clean_reason(self) -> str:
        reason = str(self.cleaned_data["reason"]).strip()
        if not reason:
            raise forms.ValidationError(_("Say why the grant is revoked."))
        return reason
