"""What the review forms share: the limits of a note and of edited arguments, the digest a
decision is bound to, and the date range of the filters.
"""

from __future__ import annotations

import re

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
