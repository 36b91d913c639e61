"""Template helpers of the review workspace: time left before a gate times out, how long an item
has waited, and the review section of the task page.

Filters return plain strings (autoescaped by the template like any other value); the section tag
checks the reader's role on the server before it reads anything.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from agentops.engine.errors import UnknownAgent
from agentops.engine.registry import get_agent
from agentops.selectors import json_preview
from agentops.services import MODIFIABLE
from agentops.states import TaskStatus
from agentops.templatetags import agentops_tags
from reviews.forms import TaskModifyForm
from reviews.selectors import decision_list_for_task, task_controls_for, task_open_gate_id

register = template.Library()


def _span(seconds: float) -> str:
    seconds = int(abs(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} days"


@register.filter
def time_left(due: datetime | None) -> str:
    """`42 min left`, or `overdue 3 min` once the timeout has passed."""
    if due is None:
        return ""
    seconds = (due - timezone.now()).total_seconds()
    return f"{_span(seconds)} left" if seconds >= 0 else f"overdue {_span(seconds)}"


@register.filter
def overdue(due: datetime | None) -> bool:
    return due is not None and due < timezone.now()


@register.filter
def waited(since: datetime | None) -> str:
    """`waiting 12 min`: how long ago `since` was."""
    if since is None:
        return ""
    return f"waiting {_span((timezone.now() - since).total_seconds())}"


# One implementation of each shared filter (agentops owns them; reviews templates use them too).
register.filter("money", agentops_tags.money)
register.filter("stamp", agentops_tags.stamp)
register.filter("failure_label", agentops_tags.failure_label)
register.filter("event_label", agentops_tags.event_label)


@register.filter
def json_line(value: Any, limit: int = 200) -> str:
    """A stored JSON value on one line, length-capped; artifacts by their pointer."""
    return json_preview(value, limit=int(limit))


@register.filter
def action_label(action: str) -> str:
    """`reviews.gate.approved` → `gate approved` (the stored name stays in the title)."""
    parts = action.split(".")
    return " ".join(parts[1:]).replace("_", " ") if len(parts) > 1 else action


@register.inclusion_tag("reviews/_partials/task_review.html", takes_context=True)
def task_review_section(context: dict[str, Any], task: Any) -> dict[str, Any]:
    """Links to the task's gate or recovery panel, and the task's decisions, for reviewers."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.has_perm("reviews.read_decisions"):
        return {"visible": False}
    readable = user.has_perm("reviews.read_reviews")
    gate_id = None
    if readable and task.status == TaskStatus.AWAITING_APPROVAL:
        gate_id = task_open_gate_id(task_id=task.pk)
    operator = user.has_perm("reviews.decide_gate")
    return {
        "visible": True,
        "task": task,
        "request": request,
        "decisions": decision_list_for_task(task_id=task.pk),
        "gate_id": gate_id,
        "recoverable": readable and task.status == TaskStatus.NEEDS_ATTENTION,
        "is_operator": operator,
        "controls": task_controls_for(task.status) if operator else [],
        "modifiable": operator and task.status in MODIFIABLE,
        "modify_form": TaskModifyForm(
            initial={
                "token_budget": task.token_budget,
                "cost_budget": task.cost_budget,
                "wall_time_budget_seconds": task.wall_time_budget_seconds,
            },
            auto_id="modify_%s",
        )
        if operator and task.status in MODIFIABLE
        else None,
        "editable": _editable_input(task.agent),
    }


def _editable_input(agent: str) -> tuple[str, ...]:
    try:
        return get_agent(agent).editable_input
    except UnknownAgent:
        return ()
