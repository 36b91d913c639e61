"""Admin actions for people's decisions on tasks: the interventions and ledger confirmations.

They extend agentops' model admins (reviews may import agentops, not the other way round) and go
through the same services as the review pages, so the role check, the advisor's allowed options
and the decision log apply to the admin too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from agentops.admin import TaskAdmin, ToolCallAdmin
from agentops.engine import AgentOpsError, message_of
from agentops.models import Task, ToolCall
from agentops.plumbing.web import ReadOnlyAdmin, request_user
from reviews.models import Decision, Delivery, NotificationRoute, WebhookEndpoint
from reviews.services import (
    ReviewError,
    intervention_apply,
    ledger_call_confirm,
    task_control_apply,
    task_modify_apply,
)
from reviews.states import VIA_BROWSER

_BUDGETS = frozenset({"token_budget", "cost_budget", "wall_time_budget_seconds"})


_Row = TypeVar("_Row", bound=Model)


def _apply(
    request: HttpRequest, items: QuerySet[_Row], action: Callable[[_Row], None], done: str
) -> None:
    """Apply one decision per selected row, reporting each row's result."""
    for item in items:
        try:
            action(item)
        except (AgentOpsError, ReviewError) as exc:
            messages.error(request, f"{item}: {message_of(exc)}")
        else:
            messages.success(request, f"{item}: {done}")


class DecidingTaskAdmin(TaskAdmin):
    """Interventions, pause/resume/cancel as actions; budget edits through `task_modify_apply`.

    The admin never saves a whole Task row: a worker may be writing the same row, and a full
    save would put back the status, lease and counters it read when the page opened. Only the
    budgets can be changed on the change page, and they go through the service (fenced
    pause-and-resume for a running task, a decision in the log)."""

    actions = ["retry", "skip", "rollback", "abort", "pause", "resume", "cancel"]
    readonly_fields = (*TaskAdmin.readonly_fields, "goal", "recovery_cap", "step_retry_cap")

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Tasks are created by `task_create` (plan, snapshot, job), never by a bare row.
        return False

    def has_change_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        # A finished task is the record: shown, with no field to edit and no Save (its budgets
        # no longer bind anything, and the service would refuse the change).
        if obj is not None and obj.is_terminal:
            return False
        return super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Task, form: Any, change: bool) -> None:
        budgets = {name: form.cleaned_data.get(name) for name in form.changed_data}
        budgets = {k: v for k, v in budgets.items() if k in _BUDGETS}
        if not budgets:
            return
        try:
            task_modify_apply(
                task_id=obj.pk,
                actor=request_user(request),
                budgets=budgets,
                input_changes={},
                reason="from the admin",
                via=VIA_BROWSER,
            )
        except (AgentOpsError, ReviewError) as exc:
            messages.error(request, f"{obj}: nothing changed: {message_of(exc)}")

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Inline rows are read-only: nothing is saved (the change message finds no changes)."""
        for formset in formsets:
            formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []

    def _control(self, request: HttpRequest, queryset: QuerySet[Task], name: str) -> None:
        _apply(
            request,
            queryset,
            lambda task: task_control_apply(
                task_id=task.pk,
                action=name,
                actor=request_user(request),
                reason="from the admin",
                via=VIA_BROWSER,
            ),
            name,
        )

    @admin.action(description="Pause")
    def pause(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._control(request, queryset, "pause")

    @admin.action(description="Resume a paused task")
    def resume(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._control(request, queryset, "resume")

    @admin.action(description="Cancel (end now, effects stay)")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._control(request, queryset, "cancel")

    def _intervene(self, request: HttpRequest, queryset: QuerySet[Task], name: str) -> None:
        _apply(
            request,
            queryset,
            lambda task: intervention_apply(
                task_id=task.pk,
                action=name,
                actor=request_user(request),
                reason="from the admin",
                via=VIA_BROWSER,
            ),
            name,
        )

    @admin.action(description="Retry the stopped step")
    def retry(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._intervene(request, queryset, "retry")

    @admin.action(description="Skip the stopped step")
    def skip(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._intervene(request, queryset, "skip")

    @admin.action(description="Roll back (compensate effects)")
    def rollback(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._intervene(request, queryset, "rollback")

    @admin.action(description="Abort")
    def abort(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._intervene(request, queryset, "abort")


class ConfirmingToolCallAdmin(ToolCallAdmin):
    actions = ["confirm_executed", "confirm_not_executed"]

    def _confirm(self, request: HttpRequest, queryset: QuerySet[ToolCall], executed: bool) -> None:
        _apply(
            request,
            queryset,
            lambda call: ledger_call_confirm(
                task_id=call.task_id,
                call_id=call.pk,
                executed=executed,
                actor=request_user(request),
                reason="from the admin",
                via=VIA_BROWSER,
            ),
            "confirmed" if executed else "confirmed not executed",
        )

    @admin.action(description="Confirm: the effect happened")
    def confirm_executed(self, request: HttpRequest, queryset: QuerySet[ToolCall]) -> None:
        self._confirm(request, queryset, True)

    @admin.action(description="Confirm: the effect did not happen")
    def confirm_not_executed(self, request: HttpRequest, queryset: QuerySet[ToolCall]) -> None:
        self._confirm(request, queryset, False)


admin.site.unregister(Task)
admin.site.register(Task, DecidingTaskAdmin)
admin.site.unregister(ToolCall)
admin.site.register(ToolCall, ConfirmingToolCallAdmin)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    """The decision log is append-only (the database refuses UPDATE and DELETE too)."""

    list_display = ("created_at", "action", "actor_label", "channel", "subject")
    list_filter = ("action", "channel")


# -- notifications: admins configure endpoints and routes; deliveries are a record ------------


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ("name", "url", "body_format", "active")


@admin.register(NotificationRoute)
class NotificationRouteAdmin(admin.ModelAdmin):
    list_display = ("id", "rule", "event", "group", "endpoint", "slack_channel")
    list_filter = ("event",)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "notice",
        "channel",
        "user",
        "endpoint",
        "slack_channel",
        "status",
        "attempts",
    )
    list_filter = ("status", "channel")
    readonly_fields = [f.name for f in Delivery._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
