from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from agentops.engine.errors import AgentOpsError
from agentops.models import Artifact, Event, Snapshot, Step, Task, ToolCall
from agentops.services import (
    ledger_confirm,
    task_abort,
    task_retry,
    task_rollback,
    task_skip_step,
)

INTERVENTION_PERMISSION = "reviews.decide_gate"


def _apply(request: HttpRequest, items: QuerySet, action, label: str) -> None:  # type: ignore[no-untyped-def]
    """Run an intervention per selected row and report each result (one failure stops none)."""
    for item in items:
        try:
            action(item, request.user)
        except AgentOpsError as exc:
            messages.error(request, f"{item}: {exc}")
        else:
            messages.success(request, f"{item}: {label}")


class InterventionAdmin(admin.ModelAdmin):
    def has_intervene_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(INTERVENTION_PERMISSION)


class StepInline(admin.TabularInline):
    model = Step
    extra = 0
    fields = ("ordinal", "title", "status", "attempts", "route", "policy_rule")
    readonly_fields = fields
    can_delete = False


@admin.register(Task)
class TaskAdmin(InterventionAdmin):
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
    readonly_fields = (
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
        "cost_used",
        "failure",
        "started_at",
        "finished_at",
        "updated_at",
    )
    inlines = [StepInline]
    actions = ["retry", "skip_step", "roll_back", "abort"]

    @admin.action(description="Retry the stopped step", permissions=["intervene"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        _apply(request, queryset, lambda t, u: task_retry(task_id=t.pk, actor=u), "retrying")

    @admin.action(description="Skip the stopped step", permissions=["intervene"])
    def skip_step(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        _apply(request, queryset, lambda t, u: task_skip_step(task_id=t.pk, actor=u), "skipped")

    @admin.action(description="Roll back (compensate effects)", permissions=["intervene"])
    def roll_back(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        _apply(request, queryset, lambda t, u: task_rollback(task_id=t.pk, actor=u), "rolling back")

    @admin.action(description="Abort", permissions=["intervene"])
    def abort(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        _apply(request, queryset, lambda t, u: task_abort(task_id=t.pk, actor=u), "aborted")


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ("task", "ordinal", "title", "status", "attempts", "route")
    list_filter = ("status", "route")
    readonly_fields = (
        "status",
        "attempts",
        "prompt_digest",
        "model_response",
        "output",
        "error",
        "route",
        "policy_version",
        "policy_rule",
        "started_at",
        "finished_at",
    )


@admin.register(ToolCall)
class ToolCallAdmin(InterventionAdmin):
    list_display = ("id", "task", "tool", "status", "idempotency_key", "created_at")
    list_filter = ("status", "tool", "side_effect")
    search_fields = ("idempotency_key",)
    readonly_fields = ("status", "result", "error", "updated_at")
    actions = ["confirm_executed", "confirm_not_executed"]

    @admin.action(description="Confirm: the effect happened", permissions=["intervene"])
    def confirm_executed(self, request: HttpRequest, queryset: QuerySet[ToolCall]) -> None:
        _apply(
            request,
            queryset,
            lambda c, u: ledger_confirm(call_id=c.pk, executed=True, actor=u),
            "confirmed",
        )

    @admin.action(description="Confirm: the effect did not happen", permissions=["intervene"])
    def confirm_not_executed(self, request: HttpRequest, queryset: QuerySet[ToolCall]) -> None:
        _apply(
            request,
            queryset,
            lambda c, u: ledger_confirm(call_id=c.pk, executed=False, actor=u),
            "confirmed not executed",
        )


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


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
