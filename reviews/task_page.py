"""The review section of the task page (`agentops.task_page` renders it; registered in
`ReviewsConfig.ready()`): links to the task's gate or recovery panel, the operator's controls, and
the task's decisions. The reader's permissions are asked here, on the server, before anything is
read; the template asks `perms.reviews.decide_gate` for the controls.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.template.loader import render_to_string

from agentops.engine import MODIFIABLE, UnknownAgent, get_agent
from agentops.models import Task
from agentops.states import TaskStatus
from reviews.forms import TaskModifyForm
from reviews.selectors import decision_list_for_task, task_controls_for, task_open_gate_id


def task_review_section(request: HttpRequest, task: Task) -> str:
    """The section's HTML for `request.user` ("" for a reader who may not see decisions)."""
    user = getattr(request, "user", None)
    if user is None or not user.has_perm("reviews.read_decisions"):
        return ""
    readable = user.has_perm("reviews.read_reviews")
    gate_id = None
    if readable and task.status == TaskStatus.AWAITING_APPROVAL:
        gate_id = task_open_gate_id(task_id=task.pk)
    operator = user.has_perm("reviews.decide_gate")
    modifiable = operator and task.status in MODIFIABLE
    context: dict[str, Any] = {
        "task": task,
        "decisions": decision_list_for_task(task_id=task.pk),
        "gate_id": gate_id,
        "recoverable": readable and task.status == TaskStatus.NEEDS_ATTENTION,
        "controls": task_controls_for(task.status) if operator else [],
        "modifiable": modifiable,
        "modify_form": TaskModifyForm(
            initial={
                "token_budget": task.token_budget,
                "cost_budget": task.cost_budget,
                "wall_time_budget_seconds": task.wall_time_budget_seconds,
            },
            auto_id="modify_%s",
        )
        if modifiable
        else None,
        "editable": _editable_input(task.agent),
    }
    return render_to_string("reviews/_partials/task_review.html", context, request=request)


def _editable_input(agent: str) -> tuple[str, ...]:
    try:
        return get_agent(agent).editable_input
    except UnknownAgent:
        return ()
