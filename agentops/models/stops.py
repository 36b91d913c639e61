"""The fleet's stop button: a person's stop of every task of an agent, of a tool, or of all
of them, until someone lifts it. Written by `engine.stops` only; the people's decision log
records who stopped and who resumed, and why."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class StopScope(models.TextChoices):
    ALL = "all", "Every task"
    AGENT = "agent", "Every task of an agent"
    TOOL = "tool", "Every call of a tool"


class FleetStop(models.Model):
    """A stop in force while `lifted_at` is empty. An `all` or `agent` stop pauses the tasks it
    covers when it is made, and a worker claims none of them while it is in force; a `tool`
    stop pauses a task when its worker is about to call the tool. Lifting it resumes the tasks
    it paused (`engine.stops`)."""

    scope = models.CharField(max_length=16, choices=StopScope.choices)
    # The agent's or the tool's name; empty for `all`.
    target = models.CharField(max_length=100, blank=True, default="")
    reason = models.TextField()
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    stopped_by_label = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    # How many tasks the stop paused when it was made (a `tool` stop pauses them later).
    paused_at_stop = models.PositiveIntegerField(default=0)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    lifted_by_label = models.CharField(max_length=150, blank=True, default="")
    lift_reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [
            (
                "stop_fleet",
                "Stop and resume every task of an agent, of a tool, or all of them",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "target"],
                condition=Q(lifted_at__isnull=True),
                name="agentops_fleetstop_one_in_force",
            ),
            models.CheckConstraint(
                condition=(Q(scope="all") & Q(target=""))
                | (Q(scope__in=["agent", "tool"]) & ~Q(target="")),
                name="agentops_fleetstop_target_fits_scope",
            ),
            models.CheckConstraint(condition=~Q(reason=""), name="agentops_fleetstop_reason_given"),
        ]

    def __str__(self) -> str:
        what = "every task" if self.scope == StopScope.ALL else f"{self.scope} {self.target}"
        return f"stop of {what}"

    @property
    def in_force(self) -> bool:
        return self.lifted_at is None
