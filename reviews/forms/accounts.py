"""A person's account forms: their language, their notification preferences and a new API
token."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy

from reviews.models import NotificationPreference
from reviews.states import NoticeEvent


# `type-arg`: ModelForm is generic only in django-stubs (see the admin override in pyproject.toml).
class NotificationPreferenceForm(forms.ModelForm):  # type: ignore[type-arg]
    """Which events reach me by email, and hours (server time) to hold email back."""

    events = forms.MultipleChoiceField(
        choices=NoticeEvent.choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        label=gettext_lazy("Events"),
        help_text=gettext_lazy("None ticked: every event."),
    )

    class Meta:
        model = NotificationPreference
        fields = ["events", "email", "quiet_from", "quiet_until"]
        widgets = {
            "quiet_from": forms.TimeInput(attrs={"type": "time"}),
            "quiet_until": forms.TimeInput(attrs={"type": "time"}),
        }
        labels = {
            "email": gettext_lazy("Send me email"),
            "quiet_from": gettext_lazy("Quiet from"),
            "quiet_until": gettext_lazy("until"),
        }

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if (data.get("quiet_from") is None) != (data.get("quiet_until") is None):
            raise forms.ValidationError(
                gettext_lazy("Give both ends of the quiet hours, or neither.")
            )
        return data


class LanguageForm(forms.Form):
    """The language I read the product in; none chosen: my browser's."""

    language = forms.ChoiceField(
        label=gettext_lazy("Language"),
        # Each language named in itself, so a person finds theirs whatever they read now.
        choices=[("", gettext_lazy("My browser's language")), *settings.LANGUAGES],
        required=False,
    )


class ApiTokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        label=gettext_lazy("Name"),
        help_text=gettext_lazy("What the token is for (a script, a bot)."),
    )
