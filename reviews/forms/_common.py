"""What the review forms share: the limits of a note and of edited arguments, the digest a
decision is bound to, the date range of the filters, and the select whose choices are record.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

NOTE_MAX = 4000
ARGUMENTS_MAX = 64 * 1024
DIGEST = re.compile(r"[0-9a-f]{64}")
# A checked gate of a bulk approval: `<id>:<digest>` (the digest its row showed).
SELECTION = re.compile(r"(\d{1,18}):([0-9a-f]{64})")


class DateRangeForm(forms.Form):
    """A filter's range of whole days (both ends included)."""

    date_from = forms.DateField(
        required=False, label=_("From"), widget=forms.DateInput(attrs={"type": "date"})
    )
    date_to = forms.DateField(
        required=False, label=_("To"), widget=forms.DateInput(attrs={"type": "date"})
    )


class RecordSelect(forms.Select):
    """A select whose choices are record (agent, tool, rule or rubric names), kept as written in
    any language: each option with a value is marked `translate="no"`. An option holds text
    only, so the mark goes on the option itself; the empty one ("All agents"), and any other of
    `own_values`, is the form's own words and is translated."""

    own_values: tuple[Any, ...] = (None, "")

    def create_option(
        self,
        name: str,
        value: Any,
        label: int | str,
        selected: bool,
        index: int,
        subindex: int | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if value not in self.own_values:
            option["attrs"]["translate"] = "no"
        return option
