"""Forms of the review workspace: gate decisions, interventions, audit verdicts and the filters.

Forms only parse and check what a person typed; writes go through `reviews.services`, which
checks roles, separation of duties and the seen digest again. Every gate form carries the digest
of the arguments the person was shown, so a decision can only apply to what they saw. Edited
arguments are checked with the same JSON validation as the save path, and a rejected text is kept
in the form for correction.
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from typing import Any, cast

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from agentops.engine import validated
from agentops.metrics import Window
from agentops.states import AuditStatus
from agentops.web import JSONObjectField
from reviews.metrics import FAST_SECONDS
from reviews.models import NotificationPreference
from reviews.selectors import AuditFilters, DecisionFilters, InboxFilters
from reviews.states import NoticeEvent

NOTE_MAX = 4000
ARGUMENTS_MAX = 64 * 1024
DIGEST = re.compile(r"[0-9a-f]{64}")
SELECTION = re.compile(r"(\d{1,18}):([0-9a-f]{64})")

LANE_CHOICES = [("", "All lanes"), ("audit", "audit"), ("auto", "auto (sampled)")]
DECISION_ACTIONS = [
    ("", "All actions"),
    (
        "Gates",
        [
            ("reviews.gate", "every gate decision"),
            ("reviews.gate.approved", "approved"),
            ("reviews.gate.edited", "edited and approved"),
            ("reviews.gate.rejected", "rejected"),
            ("reviews.gate.rejected_and_stopped", "rejected and stopped"),
            ("reviews.gate.expired", "expired"),
            ("reviews.gate.escalated", "escalated"),
        ],
    ),
    (
        "Stopped tasks",
        [
            ("reviews.intervention", "every intervention"),
            ("reviews.intervention.retry", "retry"),
            ("reviews.intervention.skip", "skip"),
            ("reviews.intervention.rollback", "rollback"),
            ("reviews.intervention.abort", "abort"),
            ("reviews.ledger.confirmed", "unknown call confirmed"),
        ],
    ),
    (
        "Tasks",
        [
            ("reviews.task", "every pause, resume, cancel or change"),
            ("reviews.task.paused", "paused"),
            ("reviews.task.resumed", "resumed"),
            ("reviews.task.cancelled", "cancelled"),
            ("reviews.task.modified", "budgets or input changed"),
        ],
    ),
    (
        "Claims",
        [
            ("reviews.claim", "every assignment or takeover"),
            ("reviews.claim.assigned", "assigned"),
            ("reviews.claim.taken_over", "taken over"),
        ],
    ),
    (
        "Audit",
        [
            ("reviews.audit", "every audit verdict"),
            ("reviews.audit.ok", "marked ok"),
            ("reviews.audit.flagged", "flagged"),
        ],
    ),
    (
        "Policies",
        [
            ("policies.version", "every publish or revert"),
            ("policies.version.published", "published"),
            ("policies.version.reverted", "reverted"),
        ],
    ),
]


class _GateForm(forms.Form):
    """A decision on one gate, bound to the arguments' digest the person saw."""

    seen_digest = forms.CharField(widget=forms.HiddenInput, max_length=64)
    # Shown when someone else holds the item: deciding it takes it over (and is logged).
    take_over = forms.BooleanField(required=False, label="Take this over and decide it myself")

    def clean_seen_digest(self) -> str:
        value: str = self.cleaned_data["seen_digest"]
        if not DIGEST.fullmatch(value):
            raise ValidationError("The form is missing the digest of what you saw; reload.")
        return value


class ApproveForm(_GateForm):
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Note (optional)",
        help_text="Recorded with your approval in the decision log.",
    )


class RejectForm(_GateForm):
    feedback = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Feedback to the agent",
        help_text="The agent reads this in its next model call and proposes another action.",
        error_messages={"required": "Say why: the agent re-plans from your feedback."},
    )


class EditApproveForm(_GateForm):
    # No HTML maxlength: a browser would cut a long paste silently, and the server would then
    # call the cut text "not valid JSON". The size is checked first, with its own message.
    arguments = JSONObjectField(
        noun="arguments",
        plural=True,
        example='{"amount": 80}',
        check=validated,
        max_chars=ARGUMENTS_MAX,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "mono"}),
        label="Arguments (JSON object)",
        help_text=f"At most {ARGUMENTS_MAX // 1024} KB ({ARGUMENTS_MAX:,} characters). The policy "
        "evaluates the edited action again; a stricter rule gates it again.",
    )
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Why you changed it (optional)",
    )


class GateSelectionField(forms.MultipleChoiceField):
    """Checked gates as `<id>:<digest>` pairs (the digest each row showed)."""

    widget = forms.MultipleHiddenInput

    def valid_value(self, value: str) -> bool:
        return bool(SELECTION.fullmatch(str(value)))


class BulkApproveForm(forms.Form):
    gate = GateSelectionField(
        error_messages={"required": "Select the gates to approve."}, label="Gates"
    )
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        label="Note for every approval (optional)",
    )

    def clean_gate(self) -> list[tuple[int, str]]:
        pairs = []
        for value in self.cleaned_data["gate"]:
            match = SELECTION.fullmatch(value)
            assert match is not None
            pairs.append((int(match.group(1)), match.group(2)))
        return list(dict.fromkeys(pairs))


class RejectStopForm(_GateForm):
    outcome = forms.ChoiceField(
        choices=[
            ("abort", "Keep the effects made so far and end the task (abort)"),
            ("rollback", "Undo the effects made so far and end the task (rollback)"),
        ],
        widget=forms.RadioSelect,
        initial="abort",
        label="And then",
    )
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Why the task stops",
        error_messages={"required": "Say why the task stops."},
    )
    confirm = forms.BooleanField(
        label="I have read what this does: the task ends and cannot be resumed",
        error_messages={"required": "Confirm that you have read what stopping does."},
    )


class InterventionForm(forms.Form):
    action = forms.ChoiceField(
        choices=[(a, a) for a in ("retry", "skip", "rollback", "abort")], label="Action"
    )
    take_over = forms.BooleanField(required=False, label="Take this over and decide it myself")
    # Rollback and abort end the task: the panel asks again, with the preview, before applying.
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Reason (optional)",
        help_text="Recorded with your choice in the decision log.",
    )


class ConfirmForm(forms.Form):
    take_over = forms.BooleanField(required=False, label="Take this over and decide it myself")
    executed = forms.TypedChoiceField(
        choices=[("yes", "It happened"), ("no", "It did not happen")],
        coerce=lambda value: value == "yes",
        label="Did the effect happen?",
    )
    # Asked only for a tool that ignores idempotency keys: calling it again may act twice.
    sure = forms.BooleanField(
        required=False, label="I am sure it did not happen: calling again is not protected by a key"
    )
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="How you know (optional)",
    )


class AuditReviewForm(forms.Form):
    verdict = forms.ChoiceField(
        choices=[(AuditStatus.OK, "OK"), (AuditStatus.FLAGGED, "Flag")], label="Verdict"
    )
    note = forms.CharField(required=False, max_length=NOTE_MAX, label="Note")

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("verdict") == AuditStatus.FLAGGED and not data.get("note", "").strip():
            self.add_error("note", "A flag needs a note saying what is wrong.")
        return data


class _DateRange(forms.Form):
    date_from = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    date_to = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )


class AuditFilterForm(_DateRange):
    agent = forms.ChoiceField(required=False, label="Agent")
    tool = forms.ChoiceField(required=False, label="Tool")
    rule = forms.ChoiceField(required=False, label="Rule")
    route = forms.ChoiceField(required=False, choices=LANE_CHOICES, label="Lane")
    status = forms.ChoiceField(
        required=False, choices=[("", "All statuses"), *AuditStatus.choices], label="Status"
    )
    field_order = ["status", "agent", "tool", "rule", "route", "date_from", "date_to"]

    def __init__(self, *args: Any, choices: dict[str, list[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, label in (("agent", "All agents"), ("tool", "All tools"), ("rule", "All rules")):
            field = cast(forms.ChoiceField, self.fields[name])
            field.choices = [("", label), *[(v, v) for v in choices[name]]]

    def filters(self) -> AuditFilters:
        """The valid filters; a value that does not parse is ignored rather than an error."""
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
        )


class DecisionFilterForm(_DateRange):
    action = forms.ChoiceField(required=False, choices=DECISION_ACTIONS, label="Action")
    user = forms.CharField(required=False, max_length=150, label="User")
    task = forms.IntegerField(required=False, min_value=1, label="Task")
    field_order = ["action", "user", "task", "date_from", "date_to"]

    def filters(self) -> DecisionFilters:
        self.is_valid()
        data = self.cleaned_data
        return DecisionFilters(
            action=data.get("action") or "",
            user=(data.get("user") or "").strip(),
            task_id=data.get("task"),
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
        )


class TaskControlForm(forms.Form):
    # Cancel ends the task: it needs this box ticked (the form states what stays done).
    confirm = forms.BooleanField(required=False)
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 1}),
        label="Reason (optional)",
    )
    next = forms.CharField(required=False, widget=forms.HiddenInput)


class TaskModifyForm(forms.Form):
    token_budget = forms.IntegerField(required=False, min_value=1, label="Token budget")
    cost_budget = forms.DecimalField(
        required=False, min_value=0, max_digits=12, decimal_places=6, label="Cost budget"
    )
    wall_time_budget_seconds = forms.IntegerField(
        required=False, min_value=1, label="Wall-time budget (seconds)"
    )
    input = JSONObjectField(
        noun="input changes",
        plural=True,
        example='{"order_id": "A1002"}',
        max_chars=ARGUMENTS_MAX,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono"}),
        label="Input changes (JSON object, editable fields only)",
    )
    reason = forms.CharField(
        required=False, max_length=NOTE_MAX, widget=forms.TextInput, label="Reason (optional)"
    )

    def budgets(self) -> dict[str, Any]:
        """Only the budgets the person filled in (an empty field leaves the budget alone)."""
        names = ("token_budget", "cost_budget", "wall_time_budget_seconds")
        return {n: self.cleaned_data[n] for n in names if self.cleaned_data.get(n) is not None}


class AssignForm(forms.Form):
    assignee: forms.ModelChoiceField[User] = forms.ModelChoiceField(
        queryset=None, label="Assign to", empty_label=None
    )
    next = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, assignees: QuerySet[User], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast("forms.ModelChoiceField[User]", self.fields["assignee"]).queryset = assignees


class AuditBulkForm(forms.Form):
    item = forms.TypedMultipleChoiceField(coerce=int, label="Items")
    verdict = forms.ChoiceField(
        choices=[(AuditStatus.OK, "Mark OK"), (AuditStatus.FLAGGED, "Flag")], label="Verdict"
    )
    note = forms.CharField(required=False, max_length=NOTE_MAX, label="Note")
    next = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Any id parses; the service skips ids that do not exist.
        self.fields["item"].valid_value = lambda value: str(value).isdigit()  # type: ignore[attr-defined]


INBOX_KINDS = [("", "Gates and stopped tasks"), ("gate", "Gates"), ("stopped", "Stopped tasks")]
INBOX_SORTS = [
    ("due", "Due first"),
    ("waiting", "Waiting longest"),
    ("newest", "Newest"),
]
INBOX_AGES = [
    ("", "Any age"),
    ("15m", "Waiting 15 min+"),
    ("1h", "Waiting 1 h+"),
    ("1d", "Waiting 1 day+"),
]


class InboxFilterForm(forms.Form):
    kind = forms.ChoiceField(required=False, choices=INBOX_KINDS, label="Kind")
    agent = forms.ChoiceField(required=False, label="Agent")
    rule = forms.ChoiceField(required=False, label="Rule")
    failure = forms.ChoiceField(required=False, label="Failure kind")
    assignee = forms.CharField(required=False, max_length=150, label="Held by")
    age = forms.ChoiceField(required=False, choices=INBOX_AGES, label="Age")
    q = forms.CharField(required=False, max_length=200, label="Search task id or goal")
    sort = forms.ChoiceField(required=False, choices=INBOX_SORTS, label="Sort")
    mine = forms.BooleanField(required=False, label="Mine only")

    def __init__(self, *args: Any, choices: dict[str, list[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, label in (
            ("agent", "All agents"),
            ("rule", "All rules"),
            ("failure", "All failure kinds"),
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


# `type-arg`: ModelForm is generic only in django-stubs (see the admin override in pyproject.toml).
class NotificationPreferenceForm(forms.ModelForm):  # type: ignore[type-arg]
    """Which events reach me by email, and hours (server time) to hold email back."""

    events = forms.MultipleChoiceField(
        choices=NoticeEvent.choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="None ticked: every event.",
    )

    class Meta:
        model = NotificationPreference
        fields = ["events", "email", "quiet_from", "quiet_until"]
        widgets = {
            "quiet_from": forms.TimeInput(attrs={"type": "time"}),
            "quiet_until": forms.TimeInput(attrs={"type": "time"}),
        }
        labels = {"email": "Send me email", "quiet_from": "Quiet from", "quiet_until": "until"}

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if (data.get("quiet_from") is None) != (data.get("quiet_until") is None):
            raise forms.ValidationError("Give both ends of the quiet hours, or neither.")
        return data


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for (a script, a bot).")


DASHBOARD_DAYS = 7


class DashboardFilterForm(_DateRange):
    """The dashboard's time range (whole days, both ends included; default the last 7 days),
    agent and fast-decision threshold. Values that do not parse fall back to the defaults."""

    agent = forms.ChoiceField(required=False, label="Agent")
    fast = forms.FloatField(
        required=False,
        min_value=0.1,
        max_value=3600,
        label="Fast decision under (s)",
        widget=forms.NumberInput(attrs={"placeholder": f"{FAST_SECONDS:g}", "step": "any"}),
    )
    field_order = ["date_from", "date_to", "agent", "fast"]

    def __init__(self, *args: Any, agents: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["agent"]).choices = [
            ("", "All agents"),
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


ENDING_CHOICES = [
    ("abort", "Abort it: it ends now, effects made stay"),
    ("cancel", "Cancel it: it ends now (shown as cancelled), effects made stay"),
    ("keep", "Keep it as it is (it has finished)"),
]


class RestartForm(forms.Form):
    """Start again: how the old task ends, the input (prefilled, editable), and why."""

    ending = forms.ChoiceField(
        choices=ENDING_CHOICES, widget=forms.RadioSelect, label="The old task"
    )
    input = JSONObjectField(
        noun="input",
        example='{"order_id": "A1002"}',
        max_chars=ARGUMENTS_MAX,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
        label="Input of the new task (JSON object)",
    )
    reason = forms.CharField(max_length=NOTE_MAX, widget=forms.TextInput, label="Why")

    def __init__(self, *args: Any, endings: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["ending"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(v, label) for v, label in ENDING_CHOICES if v in endings]
        if len(endings) == 1:
            field.initial = endings[0]


class ForkForm(forms.Form):
    """Fork from a step: where the new task continues, the input (editable), and why."""

    from_step = forms.TypedChoiceField(coerce=int, label="Continue from step")
    input = JSONObjectField(
        noun="input",
        example='{"order_id": "A1002"}',
        max_chars=ARGUMENTS_MAX,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
        label="Input of the new task (JSON object)",
    )
    reason = forms.CharField(max_length=NOTE_MAX, widget=forms.TextInput, label="Why")

    def __init__(self, *args: Any, points: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["from_step"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(str(ordinal), label) for ordinal, label in points]
