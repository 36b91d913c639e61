"""Forms of the agentops pages: starting a task, and filtering the task list.

Forms only parse and check what a person typed; writes go through the engine's commands. The task
input is checked with the same JSON validation the save path uses, so a value the form accepts is
one the service will persist, and a rejected one keeps the person's text for correction.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput
from django.utils.translation import gettext_lazy as _

from agentops.engine.errors import AgentUnavailable, NotSerializable, UnknownAgent
from agentops.engine.jsonvalues import validated
from agentops.engine.needs import agent_check_available, agents_offered
from agentops.engine.registry import get_agent
from agentops.plumbing.web import JSONObjectField
from agentops.selectors import CANCELLED, CANCELLED_LABEL
from agentops.states import TaskStatus

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

INPUT_MAX_CHARS = 64 * 1024


def agent_choices() -> list[tuple[str, str]]:
    """The agents a person may start here, as (name, label): not hidden, and with every setting
    they need (`engine.needs`)."""
    return [
        (a.name, f"{a.name} — {a.description}" if a.description else a.name)
        for a in agents_offered()
    ]


class AgentField(forms.ChoiceField):
    """The agents offered here; an agent that is registered but not offered is refused with
    what it lacks (`AgentUnavailable`'s words), not only as "not one of the choices"."""

    def validate(self, value: Any) -> None:
        if value and not self.valid_value(value):
            try:
                agent_check_available(get_agent(value))
            except UnknownAgent:
                pass  # not one of the choices, as any other word
            except AgentUnavailable as exc:
                raise ValidationError(exc.message, code="invalid_choice") from None
        super().validate(value)


class TaskStartForm(forms.Form):
    # The options are agents' names and their declarations' descriptions, kept as written.
    agent = AgentField(
        choices=(),
        label=_("Agent"),
        help_text=_("The registered agent that will run the task."),
        widget=forms.Select(attrs={"translate": "no"}),
    )
    goal = forms.CharField(
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3, "translate": "no"}),
        label=_("Goal"),
        help_text=_("What the agent should achieve, in one or two sentences."),
    )
    input = JSONObjectField(
        noun="input",
        example='{"order_id": "A1001"}',
        check=validated,
        max_chars=INPUT_MAX_CHARS,
        required=False,
        widget=forms.Textarea(
            attrs={
                "rows": 6,
                "spellcheck": "false",
                "translate": "no",
                "placeholder": '{"order_id": "A1001"}',
                "maxlength": INPUT_MAX_CHARS,
            }
        ),
        label=_("Input (JSON object, optional)"),
        help_text=_("Structured input for the agent, e.g. the order to refund."),
    )

    token_budget = forms.IntegerField(
        required=False,
        min_value=1,
        label=_("Token budget"),
        help_text=_("Stop the task once it has used this many model tokens."),
    )
    cost_budget = forms.DecimalField(
        required=False,
        min_value=Decimal("0.000001"),
        max_digits=12,
        decimal_places=6,
        label=_("Cost budget"),
        help_text=_("Stop the task once its model calls cost this much."),
    )
    wall_time_budget_seconds = forms.IntegerField(
        required=False,
        min_value=1,
        label=_("Time budget (seconds)"),
        help_text=_("Stop the task once it has run this long (default: the site's setting)."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at request time: agents register when the app is ready, after this module loads.
        cast(forms.ChoiceField, self.fields["agent"]).choices = agent_choices()


class StorableJSONField(forms.JSONField):
    """A JSON form field (admin) that also refuses what PostgreSQL cannot store (NUL, lone
    surrogates, NaN, nesting deeper than `jsonvalues.MAX_DEPTH`), naming the path of the
    offending value; text nested too deeply for json to read is refused too, not a 500."""

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError:
            raise ValidationError(_("The value is nested too deeply."), code="too_deep") from None
        try:
            validated(converted, "value")
        except NotSerializable as exc:
            raise ValidationError(str(exc), code="not_serializable") from None
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        # The refused text is shown again as typed (json cannot read it back either).
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)


def status_filter_choices() -> list[tuple[str, StrOrPromise]]:
    """The task list's statuses: the stored ones, with "Cancelled" after "Aborted" (an aborted
    task a person cancelled, as the list labels it)."""
    choices: list[tuple[str, StrOrPromise]] = [("", _("All statuses"))]
    for value, label in TaskStatus.choices:
        choices.append((value, label))
        if value == TaskStatus.ABORTED:
            choices.append((CANCELLED, CANCELLED_LABEL))
    return choices


class TaskFilterForm(forms.Form):
    status = forms.ChoiceField(required=False, choices=status_filter_choices, label=_("Status"))
