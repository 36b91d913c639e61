"""The dashboard's forms: its time range and thresholds, and a calibration proposal turned into
a policy draft.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any, cast

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agentops.metrics import Window
from reviews.forms._common import DateRangeForm, RecordSelect
from reviews.metrics import FAST_SECONDS

DASHBOARD_DAYS = 7


class DashboardFilterForm(DateRangeForm):
    """The dashboard's time range (whole days, both ends included; default the last 7 days),
    agent and fast-decision threshold. Values that do not parse fall back to the defaults."""

    agent = forms.ChoiceField(required=False, label=_("Agent"), widget=RecordSelect)
    fast = forms.FloatField(
        required=False,
        min_value=0.1,
        max_value=3600,
        label=_("Fast decision under (s)"),
        widget=forms.NumberInput(attrs={"placeholder": f"{FAST_SECONDS:g}", "step": "any"}),
    )
    field_order = ["date_from", "date_to", "agent", "fast"]

    def __init__(self, *args: Any, agents: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["agent"]).choices = [
            ("", _("All agents")),
            *[(a, a) for a in agents],
        ]

    def window(self) -> Window:
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        today = timezone.localdate()
        last = data.get("date_to") or today
        first = data.get("date_from") or last - timedelta(days=DASHBOARD_DAYS - 1)
        first, last = min(first, last), max(first, last)
        zone = timezone.get_current_timezone()
        since = datetime.combine(first, time.min, tzinfo=zone)
        until = datetime.combine(last + timedelta(days=1), time.min, tzinfo=zone)
        return Window(since=since, until=until, agent=data.get("agent") or "")

    def fast_seconds(self) -> float:
        self.is_valid()
        return getattr(self, "cleaned_data", {}).get("fast") or FAST_SECONDS


class CalibrationDraftForm(forms.Form):
    """A proposal an admin turns into a policy draft (the dashboard posts the proposal back)."""

    rule = forms.CharField(max_length=200)
    agent = forms.CharField(max_length=100)
    tool = forms.CharField(max_length=100)
    threshold = forms.FloatField(min_value=0.01, max_value=1.0)
    policy_id = forms.IntegerField(required=False, min_value=1)
