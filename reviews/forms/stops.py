"""The fleet's stop button's forms: what to stop (every task, an agent's, a tool's) and why,
and the reason a stop is lifted."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from agentops.engine import stop_targets
from reviews.forms._common import NOTE_MAX, RecordSelect

ALL = "all:"


def what_choices() -> list[tuple[object, object]]:
    """One select for the stop's scope and target (`scope:target`), grouped: no script needed to
    show the right list, and one control to reach by keyboard."""
    targets = stop_targets()
    return [
        (ALL, _("Every task")),
        (_("Every task of the agent"), [(f"agent:{n}", n) for n in targets["agent"]]),
        (_("Every call of the tool"), [(f"tool:{n}", n) for n in targets["tool"]]),
    ]


class TargetSelect(RecordSelect):
    """The stop's targets are agent and tool names, kept as written; "Every task" is the form's
    own words, translated."""

    own_values = (None, "", ALL)


class FleetStopForm(forms.Form):
    what = forms.ChoiceField(label=_("What to stop"), widget=TargetSelect)
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Reason"),
        help_text=_("Kept in the decision log and shown on every page while the stop is in force."),
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["what"].choices = what_choices()  # type: ignore[attr-defined]

    def scope_target(self) -> tuple[str, str]:
        scope, _colon, target = self.cleaned_data["what"].partition(":")
        return scope, target


class FleetResumeForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 1, "translate": "no"}),
        label=_("Reason (optional)"),
    )
