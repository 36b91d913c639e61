"""The form that answers an agent's question: one of the options it offered, or the person's own
words (not both), bound to the digest of the question the person saw."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from agentops.engine import QuestionView
from reviews.forms._common import NOTE_MAX


class QuestionAnswerForm(forms.Form):
    seen_digest = forms.CharField(max_length=64, widget=forms.HiddenInput)
    choice = forms.ChoiceField(
        required=False, widget=forms.RadioSelect, label=_("Choose one of the agent's options")
    )
    answer = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 3, "translate": "no"}),
        label=_("Or answer in your own words"),
        help_text=_("The agent reads your answer as the result of its question."),
    )
    take_over = forms.BooleanField(required=False, label=_("Take this over and answer it myself"))

    def __init__(self, *args: Any, asked: QuestionView, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choice = self.fields["choice"]
        assert isinstance(choice, forms.ChoiceField)
        choice.choices = [(option, option) for option in asked.options]
        if not asked.options:
            del self.fields["choice"]
            self.fields["answer"].label = _("Your answer")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        chosen, typed = cleaned.get("choice") or "", (cleaned.get("answer") or "").strip()
        if not self.errors and bool(chosen) == bool(typed):
            raise forms.ValidationError(
                _("Choose one of the options or answer in your own words (one of the two).")
                if "choice" in self.fields
                else _("Write your answer.")
            )
        return cleaned
