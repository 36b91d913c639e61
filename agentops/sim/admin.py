from __future__ import annotations

from django.contrib import admin

from agentops.sim.models import Effect, Fault


@admin.register(Fault)
class FaultAdmin(admin.ModelAdmin):
    list_display = ("service", "operation", "mode", "remaining", "delay_seconds")
    list_editable = ("mode", "remaining", "delay_seconds")


@admin.register(Effect)
class EffectAdmin(admin.ModelAdmin):
    list_display = ("id", "service", "operation", "idempotency_key", "created_at")
    list_filter = ("service", "operation")
    search_fields = ("idempotency_key",)
