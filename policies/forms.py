"""Forms of the policy editor. They parse what an admin typed; writes go through the services.

Ranges (confidence in [0, 1], amounts of 0 or more, sample rates) are deliberately not checked
here: a draft may hold them, and `validate` reports them next to the rule, the same messages that
block publishing.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.utils.functional import lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, pgettext_lazy

from policies import catalog
from policies.engine import Route
from policies.models import PolicyRule, TimeoutAction
from policies.phrases import Phrase, gettext_noop

# The routes as the editor names them (stored and sent as the Route values).
ROUTE_CHOICES = [
    (Route.AUTO.value, pgettext_lazy("route", "auto")),
    (Route.AUDIT.value, pgettext_lazy("route", "audit")),
    (Route.GATE.value, pgettext_lazy("route", "gate")),
    (Route.DENY.value, pgettext_lazy("route", "deny")),
]
EDITED_CHOICES = [
    ("", gettext_lazy("either")),
    ("yes", gettext_lazy("edited by a human")),
    ("no", gettext_lazy("not edited")),
]
APPROVAL_CHOICES = [
    (1, gettext_lazy("one person")),
    (2, gettext_lazy("two different people (four eyes)")),
]


def _days_text(days: int) -> str:
    return ngettext("%(days)s day", "%(days)s days", days) % {"days": days}


# Each label translated when it is shown (ngettext_lazy's `%` would translate it at import, in
# whatever language was active then).
DAYS_CHOICES = [(n, lazy(_days_text, str)(n)) for n in (1, 7, 14, 30, 90)]


def _split(value: str) -> list[str]:
    return list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))


class RuleForm(forms.Form):
    name = forms.CharField(max_length=100, label=gettext_lazy("Name"))
    route = forms.ChoiceField(choices=ROUTE_CHOICES, label=gettext_lazy("Route"))
    unknown_tool = forms.BooleanField(
        required=False, label=gettext_lazy("The tool is not in the catalog")
    )
    tools = forms.CharField(
        required=False,
        label=gettext_lazy("Tools"),
        help_text=gettext_lazy("Comma-separated tool names."),
    )
    side_effects = forms.CharField(required=False, label=gettext_lazy("Side-effect classes"))
    systems = forms.CharField(
        required=False,
        label=gettext_lazy("Systems"),
        help_text=gettext_lazy("Matches if the action touches any."),
    )
    touches_sensitive = forms.BooleanField(
        required=False, label=gettext_lazy("Touches a sensitive system")
    )
    amount_above = forms.FloatField(
        required=False,
        label=gettext_lazy("Amount above"),
        help_text=gettext_lazy("Matches amounts strictly above."),
    )
    confidence_below = forms.FloatField(
        required=False,
        label=gettext_lazy("Confidence below"),
        help_text=gettext_lazy("Matches model confidence strictly below (0 to 1)."),
    )
    agents = forms.CharField(
        required=False,
        label=gettext_lazy("Agents"),
        help_text=gettext_lazy("Comma-separated agent names."),
    )
    step_at_least = forms.IntegerField(required=False, label=gettext_lazy("Step index at least"))
    step_at_most = forms.IntegerField(required=False, label=gettext_lazy("Step index at most"))
    edited = forms.ChoiceField(
        choices=EDITED_CHOICES, required=False, label=gettext_lazy("Arguments")
    )
    is_default = forms.BooleanField(
        required=False, label=gettext_lazy("Default rule (matches everything; must be last)")
    )
    sample_rate = forms.FloatField(
        required=False,
        label=gettext_lazy("Sample rate"),
        help_text=gettext_lazy(
            "auto and audit only: share of decisions queued for audit (0 to 1). Empty: 1 for "
            "audit, 0 for auto."
        ),
    )
    approver_group = forms.CharField(
        required=False,
        max_length=150,
        initial="operators",
        label=gettext_lazy("Approver group"),
        help_text=gettext_lazy("gate only. Empty: operators."),
    )
    timeout_seconds = forms.IntegerField(
        required=False,
        min_value=0,
        initial=3600,
        label=gettext_lazy("Timeout seconds"),
        help_text=gettext_lazy("gate only; 3600 is one hour."),
    )
    timeout_action = forms.ChoiceField(
        choices=TimeoutAction.choices, required=False, label=gettext_lazy("Timeout action")
    )
    escalate_to = forms.CharField(
        required=False,
        max_length=150,
        label=gettext_lazy("Escalate to"),
        help_text=gettext_lazy("The group a timed-out gate escalates to."),
    )
    approvals_required = forms.TypedChoiceField(
        choices=APPROVAL_CHOICES,
        coerce=int,
        initial=1,
        required=False,
        empty_value=None,
        label=gettext_lazy("Approvals"),
        help_text=gettext_lazy(
            "gate only. Two: two different people must approve (neither the task's starter); an "
            "edit between them starts over, a rejection by either ends it."
        ),
    )
    second_approver_group = forms.CharField(
        required=False,
        max_length=150,
        label=gettext_lazy("Second approver group"),
        help_text=gettext_lazy(
            "Two approvals only: the group the second approval comes from. Empty: the approver "
            "group again."
        ),
    )

    # Where a new rule goes: before rule N (1-based), or "" for where it is reached.
    insert_before = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, label=gettext_lazy("Position")
    )

    # Fields that apply to one route only (the editor hides the others: CSS `:has`, no script).
    GATE_ONLY = (
        "approver_group",
        "timeout_seconds",
        "timeout_action",
        "escalate_to",
        "approvals_required",
        "second_approver_group",
    )
    LANE_ONLY = ("sample_rate",)

    def __init__(self, *args: Any, rule_count: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        classes = ", ".join(catalog.known_classes())
        # The class names stay as written (translate="no") inside the translated sentence.
        self.fields["side_effects"].help_text = Phrase(
            gettext_noop("Comma-separated; known: %(classes)s."), {"classes": classes}
        )
        if rule_count is None:
            del self.fields["insert_before"]
        else:
            cast(forms.ChoiceField, self.fields["insert_before"]).choices = [
                ("", _("Where it is reached: before the first rule that catches its actions")),
                *[
                    (str(n), _("Before rule %(number)s") % {"number": n})
                    for n in range(1, rule_count + 1)
                ],
            ]

    def position(self) -> int | None:
        """The 0-based insert position chosen, or None for where the rule is reached."""
        chosen = self.cleaned_data.get("insert_before")
        return chosen - 1 if chosen else None

    @classmethod
    def for_rule(cls, rule: PolicyRule, **kwargs: Any) -> RuleForm:
        edited = "" if rule.edited is None else ("yes" if rule.edited else "no")
        initial = {
            "name": rule.name,
            "route": rule.route,
            "unknown_tool": rule.unknown_tool,
            "tools": ", ".join(rule.tools),
            "side_effects": ", ".join(rule.side_effects),
            "systems": ", ".join(rule.systems),
            "touches_sensitive": rule.touches_sensitive,
            "amount_above": rule.amount_above,
            "confidence_below": rule.confidence_below,
            "agents": ", ".join(rule.agents),
            "step_at_least": rule.step_at_least,
            "step_at_most": rule.step_at_most,
            "edited": edited,
            "is_default": rule.is_default,
            "sample_rate": rule.sample_rate,
            "approver_group": rule.approver_group,
            "timeout_seconds": rule.timeout_seconds,
            "timeout_action": rule.timeout_action,
            "escalate_to": rule.escalate_to,
            "approvals_required": rule.approvals_required,
            "second_approver_group": rule.second_approver_group,
        }
        return cls(initial=initial, **kwargs)

    def rule_fields(self) -> dict[str, Any]:
        """The cleaned data as the keyword fields the rule services take."""
        data = dict(self.cleaned_data)
        for key in ("tools", "side_effects", "systems", "agents"):
            data[key] = _split(data[key])
        data["edited"] = {"": None, "yes": True, "no": False}[data["edited"] or ""]
        data["timeout_action"] = data["timeout_action"] or TimeoutAction.REJECT
        data.pop("insert_before", None)
        if data.get("route") == Route.GATE:
            # A gate is decided by operators unless the rule names another group; the timeout
            # comes pre-filled in the form (an explicitly cleared one is a validation error).
            data["approver_group"] = data.get("approver_group") or "operators"
            data["sample_rate"] = None
        else:
            # Hidden fields of another route (their defaults were submitted) do not apply.
            data.update(
                approver_group="",
                timeout_seconds=None,
                escalate_to="",
                approvals_required=1,
                second_approver_group="",
            )
            data["timeout_action"] = TimeoutAction.REJECT
        return data


class MoveForm(forms.Form):
    position = forms.IntegerField(min_value=0, label=gettext_lazy("Position"))


class SettingsForm(forms.Form):
    sensitive_systems = forms.CharField(
        required=False,
        label=gettext_lazy("Sensitive systems"),
        help_text=gettext_lazy("Comma-separated; rules may match 'touches a sensitive system'."),
    )

    def systems(self) -> list[str]:
        return _split(self.cleaned_data["sensitive_systems"])


class ChangeNoteForm(forms.Form):
    change_note = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        label=gettext_lazy("Change note"),
        help_text=gettext_lazy("Why this version exists; shown in the version history."),
    )
    # Publishing and reverting change what every new task runs under: asked again, with the
    # preview of what changes, before anything is published.
    confirm = forms.BooleanField(
        label=gettext_lazy("I have read what changes compared with the active version"),
        error_messages={"required": gettext_lazy("Confirm that you have read what changes.")},
    )


class DraftCreateForm(forms.Form):
    from_version = forms.IntegerField(required=False, widget=forms.HiddenInput)


class DiffForm(forms.Form):
    a = forms.TypedChoiceField(coerce=int, label=gettext_lazy("From"))
    b = forms.TypedChoiceField(coerce=int, label=gettext_lazy("To"))

    def __init__(self, *args: Any, versions: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(v.pk, v.label) for v in versions]
        cast(forms.ChoiceField, self.fields["a"]).choices = choices
        cast(forms.ChoiceField, self.fields["b"]).choices = choices


class DryRunForm(forms.Form):
    days = forms.TypedChoiceField(
        coerce=int, choices=DAYS_CHOICES, initial=7, label=gettext_lazy("Days")
    )
