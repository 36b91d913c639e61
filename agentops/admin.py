from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from agentops.forms import StorableJSONField
from agentops.models import (
    ApiToken,
    Artifact,
    AuditItem,
    Event,
    Gate,
    Snapshot,
    Step,
    Task,
    ToolCall,
)
from agentops.plumbing.web import ReadOnlyAdmin


class StepInline(admin.TabularInline):
    model = Step
    extra = 0
    fields = ("ordinal", "title", "status", "attempts", "route", "policy_rule")
    readonly_fields = fields
    can_delete = False


# Every JSON field edited in the admin is refused like the save path refuses it.
STORABLE_JSON: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
    models.JSONField: {"form_class": StorableJSONField}
}


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    formfield_overrides = STORABLE_JSON
    list_display = (
        "id",
        "agent",
        "status",
        "current_step",
        "step_count",
        "recoveries",
        "created_at",
    )
    list_filter = ("status", "agent")
    search_fields = ("goal",)
    # Interventions (retry, skip, rollback, abort, confirm) are admin actions added by
    # reviews.admin, which logs them as decisions. Who started a task and the policy it pinned are
    # facts, not settings: editing them would defeat separation of duties and policy pinning.
    readonly_fields: ClassVar[tuple[str, ...]] = (
        "agent",
        "input",
        "created_by",
        "policy_version",
        "status",
        "phase",
        "current_step",
        "step_count",
        "lease_epoch",
        "lease_owner",
        "lease_expires_at",
        "next_run_at",
        "last_seq",
        "claims",
        "recoveries",
        "tokens_used",
        "tokens_saved",
        "cost_used",
        "failure",
        "started_at",
        "finished_at",
        "updated_at",
    )
    inlines = [StepInline]

    def has_delete_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        # A task's rows are the record: only `manage.py retention` removes finished tasks.
        return False


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    """A step is engine state, written only by the runner and the services (a saved row would
    overwrite what a worker is writing), and part of the record: nobody deletes it here."""

    list_display = ("task", "ordinal", "title", "status", "attempts", "route")
    list_filter = ("status", "route")


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    """The side-effect ledger: the runner writes it, a person confirms an unknown outcome through
    an action (reviews.admin). The database refuses changing a row's identity or deleting it."""

    list_display = ("id", "task", "tool", "status", "idempotency_key", "created_at")
    list_filter = ("status", "tool", "side_effect")
    search_fields = ("idempotency_key",)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("task", "seq", "action", "step_ordinal", "actor_label", "created_at")
    list_filter = ("action",)


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyAdmin):
    list_display = ("task", "seq", "created_at")


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "name", "size", "sha256", "created_at")


@admin.register(Gate)
class GateAdmin(ReadOnlyAdmin):
    """Gates move only along the engine's gate transitions (reviews decides them on its pages)."""

    list_display = ("id", "task", "tool", "status", "rule", "approver_group", "due_at")
    list_filter = ("status", "rule")


@admin.register(AuditItem)
class AuditItemAdmin(ReadOnlyAdmin):
    """Audit items are reviewed on the audit queue, through reviews' services."""

    list_display = ("id", "task", "tool", "route", "sampled", "status", "created_at")
    list_filter = ("status", "route", "sampled")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made by their owner (account page or `api_token`); an admin may revoke."""

    list_display = ("id", "user", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("user", "name", "prefix", "key_hash", "created_at", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
