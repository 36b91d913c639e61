"""The forms of starting a task again and forking it from a step (`reviews.again_page`,
`reviews.views.again`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from agentops.plumbing.web import JSONObjectField
from reviews.forms._common import ARGUMENTS_MAX, NOTE_MAX, RecordSelect

ENDING_CHOICES = [
    ("abort", _("Abort it: it ends now, effects made stay")),
    ("cancel", _("Cancel it: it ends now (shown as cancelled), effects made stay")),
    ("keep", _("Keep it as it is (it has finished)")),
]


class RestartForm(forms.Form):
    """Start again: how the old task ends, the input (prefilled, editable), and why."""

    ending = forms.ChoiceField(
        choices=ENDING_CHOICES,
        widget=forms.RadioSelect,
        label=_("The old task"),
        error_messages={"required": _("Choose what happens to the old task.")},
    )
    input = JSONObjectField(
        noun="input",
        example='{"order_id": "A1002"}',
        max_chars=ARGUMENTS_MAX,
        widget=forms.Textarea(
            attrs={"rows": 4, "spellcheck": "false", "class": "mono", "translate": "no"}
        ),
        label=_("Input of the new task (JSON object)"),
    )
    reason = forms.CharField(
        max_length=NOTE_MAX, widget=forms.TextInput(attrs={"translate": "no"}), label=_("Why")
    )

    def __init__(self, *args: Any, endings: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["ending"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(v, label) for v, label in ENDING_CHOICES if v in endings]
        if len(endings) == 1:
            field.initial = endings[0]


class ForkForm(forms.Form):
    """Fork from a step: where the new task continues, the input (editable), and why."""

    # Each option names a step by its title (record): the option is kept as written; its words
    # ("step 2:") are translated when the choices are made (`reviews.again_page.fork_choices`).
    from_step = forms.TypedChoiceField(
        coerce=int, label=_("Continue from step"), widget=RecordSelect
    )
    input = JSONObjectField(
        noun="input",
        example='{"order_id": "A1002"}',
        max_chars=ARGUMENTS_MAX,
        widget=forms.Textarea(
            attrs={"rows": 4, "spellcheck": "false", "class": "mono", "translate": "no"}
        ),
        label=_("Input of the new task (JSON object)"),
    )
    reason = forms.CharField(
        max_length=NOTE_MAX, widget=forms.TextInput(attrs={"translate": "no"}), label=_("Why")
    )

    def __init__(self, *args: Any, points: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["from_step"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(str(ordinal), label) for ordinal, label in points]
