"""The audit queue's forms: one verdict, a bulk verdict, and the queue's filters."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from agentops.states import AuditStatus
from reviews.forms._common import NOTE_MAX, DateRangeForm, RecordSelect
from reviews.selectors import AuditFilters
from reviews.selectors.audit import HELD_FREE, HELD_MINE
from reviews.selectors.datasets import DatasetFilters

# Lanes are the product's words (`components/route_name.html` names them the same way).
LANE_CHOICES = [
    ("", _("All lanes")),
    ("audit", pgettext_lazy("route", "audit")),
    ("auto", _("auto (sampled)")),
]


class AuditReviewForm(forms.Form):
    verdict = forms.ChoiceField(
        choices=[(AuditStatus.OK, _("OK")), (AuditStatus.FLAGGED, _("Flag"))], label=_("Verdict")
    )
    note = forms.CharField(required=False, max_length=NOTE_MAX, label=_("Note"))

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("verdict") == AuditStatus.FLAGGED and not data.get("note", "").strip():
            self.add_error("note", _("A flag needs a note saying what is wrong."))
        return data


class AuditFilterForm(DateRangeForm):
    agent = forms.ChoiceField(required=False, label=_("Agent"), widget=RecordSelect)
    tool = forms.ChoiceField(required=False, label=_("Tool"), widget=RecordSelect)
    rule = forms.ChoiceField(required=False, label=_("Rule"), widget=RecordSelect)
    route = forms.ChoiceField(required=False, choices=LANE_CHOICES, label=_("Lane"))
    status = forms.ChoiceField(
        required=False, choices=[("", _("All statuses")), *AuditStatus.choices], label=_("Status")
    )
    held = forms.ChoiceField(
        required=False,
        choices=[("", _("Held or not")), (HELD_MINE, _("Taken by me")), (HELD_FREE, _("Free"))],
        label=_("Batch"),
    )
    field_order = ["status", "held", "agent", "tool", "rule", "route", "date_from", "date_to"]

    def __init__(
        self, *args: Any, choices: dict[str, list[str]], holder_id: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.holder_id = holder_id
        for name, label in (
            ("agent", _("All agents")),
            ("tool", _("All tools")),
            ("rule", _("All rules")),
        ):
            field = cast(forms.ChoiceField, self.fields[name])
            field.choices = [("", label), *[(v, v) for v in choices[name]]]

    def filters(self) -> AuditFilters:
        """The filters; the view answers 400 before asking when one does not parse."""
        self.is_valid()
        data = self.cleaned_data
        return AuditFilters(
            agent=data.get("agent") or "",
            tool=data.get("tool") or "",
            rule=data.get("rule") or "",
            route=data.get("route") or "",
            status=data.get("status") or "",
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
            held=data.get("held") or "",
            holder_id=self.holder_id,
        )


class AuditBulkForm(forms.Form):
    item = forms.TypedMultipleChoiceField(coerce=int, label=_("Items"))
    verdict = forms.ChoiceField(
        choices=[(AuditStatus.OK, _("Mark OK")), (AuditStatus.FLAGGED, _("Flag"))],
        label=_("Verdict"),
    )
    note = forms.CharField(required=False, max_length=NOTE_MAX, label=_("Note"))
    next = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Any id parses; the service skips ids that do not exist.
        self.fields["item"].valid_value = lambda value: str(value).isdigit()  # type: ignore[attr-defined]


class AuditBatchForm(forms.Form):
    """Take a batch of the queue's items for a stated time."""

    size = forms.IntegerField(min_value=1, max_value=50, initial=10, label=_("Items to take"))
    minutes = forms.IntegerField(min_value=1, max_value=480, initial=30, label=_("Minutes"))


VERDICT_CHOICES = [
    ("", _("OK and flagged")),
    (AuditStatus.OK, _("OK")),
    (AuditStatus.FLAGGED, _("Flagged")),
]


class DatasetFilterForm(DateRangeForm):
    """The evaluation dataset's filters: agent, rule, period (when the step ran) and verdict."""

    agent = forms.CharField(required=False, max_length=100, label=_("Agent"))
    rule = forms.CharField(required=False, max_length=200, label=_("Rule"))
    verdict = forms.ChoiceField(required=False, choices=VERDICT_CHOICES, label=_("Verdict"))

    def filters(self) -> DatasetFilters:
        """The filters; the view answers 400 before asking when one does not parse."""
        self.is_valid()
        data = self.cleaned_data
        return DatasetFilters(
            agent=data.get("agent") or "",
            rule=data.get("rule") or "",
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
            verdict=data.get("verdict") or "",
        )
