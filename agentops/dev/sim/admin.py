"""Admin for the simulated services: faults editable per endpoint, effects to inspect.

Fault writes go through `agentops.dev.sim.services` (the same code as the `sim_fault` command), and
the form accepts only endpoints that exist in `world.ENDPOINTS`.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from agentops.dev.sim.models import Effect, Fault, FaultMode
from agentops.dev.sim.services import (
    FaultInvalid,
    delay_check,
    fault_check,
    fault_reset,
    fault_set,
)
from agentops.dev.sim.world import ENDPOINTS


class FaultSettingsForm(forms.ModelForm):
    """Mode, count and delay, as edited on the change list and on the change page."""

    class Meta:
        model = Fault
        fields = ("mode", "remaining", "delay_seconds")

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        spent = cleaned.get("remaining") == 0 and cleaned.get("mode") != FaultMode.OK
        if spent and self.has_changed():
            # 0 is what a "next N calls" fault counts down to; saving it would set nothing.
            self.add_error("remaining", "Give at least 1, or leave empty for every call.")
        try:
            delay_check(cleaned.get("delay_seconds") or 0)
        except FaultInvalid as exc:
            self.add_error("delay_seconds", str(exc))
        return cleaned


class FaultForm(FaultSettingsForm):
    service = forms.ChoiceField()
    operation = forms.ChoiceField()

    class Meta:
        model = Fault
        fields = ("service", "operation", "mode", "remaining", "delay_seconds")
        help_texts = {
            "remaining": "Fail only the next N calls; leave empty for every call until reset.",
            "delay_seconds": "Seconds a timeout or slow mode waits, or Retry-After for 429; "
            "0 keeps the service's default.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["service"]).choices = [
            (s, s) for s in sorted({s for s, _ in ENDPOINTS})
        ]
        cast(forms.ChoiceField, self.fields["operation"]).choices = [
            (o, o) for o in sorted({o for _, o in ENDPOINTS})
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        service, operation = cleaned.get("service"), cleaned.get("operation")
        if service and operation:
            try:
                fault_check(service=service, operation=operation)
            except FaultInvalid:
                valid = sorted(op for svc, op in ENDPOINTS if svc == service)
                raise forms.ValidationError(
                    f"{service} has no operation {operation!r}; it has: {', '.join(valid)}"
                ) from None
        return cleaned


@admin.register(Fault)
class FaultAdmin(admin.ModelAdmin):
    form = FaultForm
    list_display = ("service", "operation", "mode", "remaining", "delay_seconds")
    list_editable = ("mode", "remaining", "delay_seconds")
    actions = ["reset_to_ok"]

    def get_changelist_form(
        self, request: HttpRequest, **kwargs: Any
    ) -> type[forms.ModelForm[Fault]]:
        return super().get_changelist_form(request, form=FaultSettingsForm, **kwargs)

    def save_model(self, request: HttpRequest, obj: Fault, form: Any, change: bool) -> None:
        if change and not form.has_changed():
            return
        saved = fault_set(
            service=obj.service,
            operation=obj.operation,
            mode=obj.mode,
            count=obj.remaining,
            delay=obj.delay_seconds,
        )
        obj.pk = saved.pk

    @admin.action(description="Reset to ok")
    def reset_to_ok(self, request: HttpRequest, queryset: QuerySet[Fault]) -> None:
        changed = fault_reset(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"Reset {changed} endpoint(s) to ok.", messages.SUCCESS)


@admin.register(Effect)
class EffectAdmin(admin.ModelAdmin):
    list_display = ("id", "service", "operation", "idempotency_key", "created_at")
    list_filter = ("service", "operation")
    search_fields = ("idempotency_key",)
