"""The inbox's forms: its filters and sort, and assigning an item to an operator."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from reviews.forms._common import RecordSelect
from reviews.selectors import InboxFilters


class AssignForm(forms.Form):
    assignee: forms.ModelChoiceField[User] = forms.ModelChoiceField(
        queryset=None, label=_("Assign to"), empty_label=None
    )
    next = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, assignees: QuerySet[User], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast("forms.ModelChoiceField[User]", self.fields["assignee"]).queryset = assignees


INBOX_KINDS = [
    ("", _("Gates, questions and stopped tasks")),
    ("gate", _("Gates")),
    ("question", _("Questions")),
    ("stopped", _("Stopped tasks")),
]


INBOX_SORTS = [
    ("due", _("Due first")),
    ("waiting", _("Waiting longest")),
    ("newest", _("Newest")),
]


INBOX_AGES = [
    ("", _("Any age")),
    ("15m", _("Waiting 15 min+")),
    ("1h", _("Waiting 1 h+")),
    ("1d", _("Waiting 1 day+")),
]


class InboxFilterForm(forms.Form):
    kind = forms.ChoiceField(required=False, choices=INBOX_KINDS, label=_("Kind"))
    agent = forms.ChoiceField(required=False, label=_("Agent"), widget=RecordSelect)
    rule = forms.ChoiceField(required=False, label=_("Rule"), widget=RecordSelect)
    failure = forms.ChoiceField(required=False, label=_("Failure kind"), widget=RecordSelect)
    assignee = forms.CharField(required=False, max_length=150, label=_("Held by"))
    age = forms.ChoiceField(required=False, choices=INBOX_AGES, label=_("Age"))
    q = forms.CharField(required=False, max_length=200, label=_("Search task id or goal"))
    sort = forms.ChoiceField(required=False, choices=INBOX_SORTS, label=_("Sort"))
    mine = forms.BooleanField(required=False, label=_("Mine only"))

    def __init__(self, *args: Any, choices: dict[str, list[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, label in (
            ("agent", _("All agents")),
            ("rule", _("All rules")),
            ("failure", _("All failure kinds")),
        ):
            field = cast(forms.ChoiceField, self.fields[name])
            field.choices = [("", label), *[(v, v) for v in choices[name]]]

    def filters(self) -> InboxFilters:
        self.is_valid()
        data = self.cleaned_data
        return InboxFilters(
            kind=data.get("kind") or "",
            agent=data.get("agent") or "",
            rule=data.get("rule") or "",
            failure=data.get("failure") or "",
            assignee=(data.get("assignee") or "").strip(),
            age=data.get("age") or "",
            q=(data.get("q") or "").strip(),
            sort=data.get("sort") or "due",
            mine=bool(data.get("mine")),
        )
