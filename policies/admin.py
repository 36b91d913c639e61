"""Read-only Django admin views of policies; changes go through the policy editor's services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from agentops.plumbing.web import ReadOnlyAdmin
from policies.models import Policy, PolicyChange, PolicyRule, PolicyVersion


class PolicyRuleInline(admin.TabularInline):
    model = PolicyRule
    extra = 0
    fields = ("position", "name", "route", "is_default")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Policy)
class PolicyAdmin(ReadOnlyAdmin):
    list_display = ("name", "description", "created_at")


@admin.register(PolicyVersion)
class PolicyVersionAdmin(ReadOnlyAdmin):
    list_display = ("policy", "number", "status", "author_label", "published_at")
    list_filter = ("policy", "status")
    inlines = [PolicyRuleInline]


@admin.register(PolicyChange)
class PolicyChangeAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "policy", "version", "action", "actor_label")
    list_filter = ("action",)
