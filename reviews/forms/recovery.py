"""The recovery panel's forms: an intervention on a stopped task, and the confirmation of a
call whose outcome is unknown.
"""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from reviews.forms._common import NOTE_MAX


class InterventionForm(forms.Form):
    action = forms.ChoiceField(
        choices=[(a, a) for a in ("retry", "skip", "rollback", "abort")], label=_("Action")
    )
    take_over = forms.BooleanField(required=False, label=_("Take this over and decide it myself"))
    # Rollback and abort end the task: the panel asks again, with the preview, before applying.
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Reason (optional)"),
        help_text=_("Recorded with your choice in the decision log."),
    )


class ConfirmForm(forms.Form):
    take_over = forms.BooleanField(required=False, label=_("Take this over and decide it myself"))
    executed = forms.TypedChoiceField(
        choices=[("yes", _("It happened")), ("no", _("It did not happen"))],
        coerce=lambda value: value == "yes",
        label=_("Did the effect happen?"),
    )
    # Asked only for a tool that ignores idempotency keys: calling it again may act twice.
    sure = forms.BooleanField(
        required=False,
        label=_("I am sure it did not happen: calling again is not protected by a key"),
    )
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("How you know (optional)"),
    )
