"""The rubric forms: answering an audit item's rubric (one radio group per rubric item, built
from the rubric), and a policy admin's rubric definition and attachment. They only parse; the
services check the answers against the rubric, and roles, again."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.functional import lazy
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agentops.states import AuditStatus
from policies.phrases import kept
from reviews.forms._common import NOTE_MAX, RecordSelect
from reviews.models import MAX_REVIEWS, RubricItem
from reviews.wording import with_kept

ANSWER_PREFIX = "a_"

# The shape of a rubric's items, in JSON's own words (kept as written in any language).
ITEMS_SHAPE = (
    '{"key", "label", "kind": "pass_fail" | "score" | "category", '
    '"required", "values": [{"value", "description"}, ...]}'
)


def _items_help() -> SafeString:
    return with_kept(gettext("A list of items: %(shape)s."), shape=ITEMS_SHAPE)


def _choice_label(value: dict[str, Any]) -> SafeString:
    # The rubric's own words (record): kept as written in any language.
    return kept(f"{value['value']}: {value['description']}")


class RubricAnswerForm(forms.Form):
    """One field per rubric item (a radio group of its values, each with its description), then
    the verdict, a note (needed to flag) and a correction."""

    verdict = forms.ChoiceField(
        choices=[(AuditStatus.OK, _("OK")), (AuditStatus.FLAGGED, _("Flag"))],
        widget=forms.RadioSelect,
        label=_("Verdict"),
        # Nothing chosen for the reviewer: a verdict given by default is automation bias.
    )
    note = forms.CharField(
        required=False, max_length=NOTE_MAX, label=_("Note"), help_text=_("Needed to flag.")
    )
    correction = forms.CharField(
        required=False,
        max_length=20_000,
        label=_("Correction"),
        help_text=_("What the output should have been, if it was wrong (goes into the dataset)."),
        widget=forms.Textarea(attrs={"rows": 3, "translate": "no"}),
    )

    def __init__(self, *args: Any, items: list[RubricItem], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rubric_items = items
        answers = {}
        for n, item in enumerate(items):
            answers[ANSWER_PREFIX + item.key] = forms.ChoiceField(
                required=item.required,
                label=kept(item.label)
                if item.required
                else with_kept(gettext("%(label)s (optional)"), label=item.label),
                choices=[(str(v["value"]), _choice_label(v)) for v in item.values],
                # Keyboard first: the page opens on the first question.
                widget=forms.RadioSelect(attrs={"autofocus": True} if n == 0 else {}),
            )
        self.fields = {**answers, **self.fields}

    def answers(self) -> dict[str, Any]:
        """The rubric answers by item key (scores stay text: the service reads them)."""
        return {
            item.key: self.cleaned_data.get(ANSWER_PREFIX + item.key) or None
            for item in self.rubric_items
        }


class RubricCreateForm(forms.Form):
    name = forms.CharField(max_length=100, label=_("Name"))
    instructions = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        label=_("Instructions"),
        widget=forms.Textarea(attrs={"translate": "no"}),
    )
    items = forms.CharField(
        label=_("Items (JSON)"),
        help_text=lazy(_items_help, SafeString)(),
        widget=forms.Textarea(attrs={"rows": 10, "translate": "no"}),
    )

    def clean_items(self) -> Any:
        try:
            return json.loads(self.cleaned_data["items"])
        except ValueError as exc:
            raise forms.ValidationError(
                _("The items are not JSON: %(error)s"), params={"error": exc}
            ) from None


class RubricAttachForm(forms.Form):
    rubric = forms.TypedChoiceField(coerce=int, label=_("Rubric"), widget=RecordSelect)
    agent = forms.CharField(required=False, max_length=100, label=_("Agent"))
    rule = forms.CharField(required=False, max_length=200, label=_("Rule"))
    reviews_required = forms.IntegerField(
        min_value=1, max_value=MAX_REVIEWS, initial=1, label=_("Reviews per item")
    )
    instructions = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        label=_("Instructions"),
        widget=forms.Textarea(attrs={"translate": "no"}),
    )

    def __init__(self, *args: Any, rubrics: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["rubric"].choices = rubrics  # type: ignore[attr-defined]
