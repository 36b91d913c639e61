"""The gate decisions' forms: approve, reject, edit and approve, reject and stop, and a bulk
approval. Each is bound to the digest of the arguments the person saw, so a decision can only
apply to what they saw; edited arguments are checked with the save path's JSON validation, and
a rejected text is kept in the form for correction.
"""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from agentops.engine import validated
from agentops.plumbing.web import JSONObjectField
from reviews.forms._common import ARGUMENTS_MAX, DIGEST, NOTE_MAX, SELECTION
from reviews.wording import translated_lazy


class _GateForm(forms.Form):
    """A decision on one gate, bound to the arguments' digest the person saw."""

    seen_digest = forms.CharField(widget=forms.HiddenInput, max_length=64)
    # Shown when someone else holds the item: deciding it takes it over (and is logged).
    take_over = forms.BooleanField(required=False, label=_("Take this over and decide it myself"))

    def clean_seen_digest(self) -> str:
        value: str = self.cleaned_data["seen_digest"]
        if not DIGEST.fullmatch(value):
            raise ValidationError(_("The form is missing the digest of what you saw; reload."))
        return value


class ApproveForm(_GateForm):
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Note (optional)"),
        help_text=_("Recorded with your approval in the decision log."),
    )


class RejectForm(_GateForm):
    feedback = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 3, "translate": "no"}),
        label=_("Feedback to the agent"),
        help_text=_("The agent reads this in its next model call and proposes another action."),
        error_messages={"required": _("Say why: the agent re-plans from your feedback.")},
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
        # The arguments are record (JSON): kept as written in any language.
        widget=forms.Textarea(
            attrs={"rows": 8, "spellcheck": "false", "class": "mono", "translate": "no"}
        ),
        label=_("Arguments (JSON object)"),
        help_text=translated_lazy(
            gettext_noop(
                "At most %(kb)s KB (%(chars)s characters). The policy evaluates the edited action "
                "again; a stricter rule gates it again."
            ),
            {"kb": ARGUMENTS_MAX // 1024, "chars": f"{ARGUMENTS_MAX:,}"},
        ),
    )
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Why you changed it (optional)"),
    )


class GateSelectionField(forms.MultipleChoiceField):
    """Checked gates as `<id>:<digest>` pairs (the digest each row showed)."""

    widget = forms.MultipleHiddenInput

    def valid_value(self, value: str) -> bool:
        return bool(SELECTION.fullmatch(str(value)))


class BulkApproveForm(forms.Form):
    gate = GateSelectionField(
        error_messages={"required": _("Select the gates to approve.")}, label=_("Gates")
    )
    reason = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        label=_("Note for every approval (optional)"),
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
            ("abort", _("Keep the effects made so far and end the task (abort)")),
            ("rollback", _("Undo the effects made so far and end the task (rollback)")),
        ],
        widget=forms.RadioSelect,
        initial="abort",
        label=_("And then"),
    )
    reason = forms.CharField(
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "translate": "no"}),
        label=_("Why the task stops"),
        error_messages={"required": _("Say why the task stops.")},
    )
    confirm = forms.BooleanField(
        label=_("I have read what this does: the task ends and cannot be resumed"),
        error_messages={"required": _("Confirm that you have read what stopping does.")},
    )
