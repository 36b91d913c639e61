"""The "start again / fork" section of the task page (registered in `ReviewsConfig.ready()`):
where the task came from and what was started from it (both ways, for every reader of the
page), the results a fork references with the ledger rows that made them, and for operators the
two forms: start again (how the old task ends, the input) and fork from a step. The recovery
panel offers the same "start again" form (`restart_form_for`).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.translation import gettext as _

from agentops.engine import Ending, fork_points
from agentops.models import Task, ToolCall
from agentops.states import TERMINAL
from reviews.forms import ForkForm, RestartForm

STOPPED = ("needs_attention", "paused")


def restart_endings(task: Task) -> list[str]:
    """How the old task may end when it is started again ([] when it may not be)."""
    if task.parent_id is not None:
        return []
    if task.status in TERMINAL:
        return [Ending.KEEP]
    if task.status in STOPPED:
        return [Ending.ABORT, Ending.CANCEL]
    return []


def fork_choices(task: Task) -> list[tuple[int, str]]:
    """The steps a fork may continue from, labelled for the form in the reader's language with
    each step's title as written (one query)."""
    steps = list(task.steps.order_by("ordinal").only("ordinal", "title", "status"))
    titles = {step.ordinal: step.title for step in steps}
    label = _("step %(number)s: %(title)s")
    return [(n, label % {"number": n + 1, "title": titles[n]}) for n in fork_points(task, steps)]


def _input_json(task: Task) -> str:
    return json.dumps(task.input, indent=2, ensure_ascii=False)


def _may_start_again(user: Any) -> bool:
    return bool(user.has_perm("reviews.decide_gate"))


def restart_form_for(user: Any, task: Task) -> RestartForm | None:
    """The empty "start again" form for an operator, when `task` may be started again (the
    task page's section and the recovery panel); None otherwise."""
    endings = restart_endings(task) if _may_start_again(user) else []
    if not endings:
        return None
    return RestartForm(endings=endings, initial={"input": _input_json(task)}, auto_id="restart_%s")


def fork_form_for(user: Any, task: Task) -> ForkForm | None:
    """The empty "fork from a step" form for an operator, when `task` has a step to fork from."""
    points = fork_choices(task) if _may_start_again(user) and task.parent_id is None else []
    if not points:
        return None
    return ForkForm(points=points, initial={"input": _input_json(task)}, auto_id="fork_%s")


def task_again_section(request: HttpRequest, task: Task) -> str:
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return ""
    origin = (
        Task.objects.filter(pk=task.origin_id).only("pk", "status", "goal").first()
        if task.origin_id is not None
        else None
    )
    again = list(task.again.order_by("id").only("pk", "status", "origin_kind", "origin_step"))
    referenced: list[ToolCall] = []
    if origin is not None and task.origin_step:
        referenced = list(
            ToolCall.objects.filter(task_id=origin.pk, step__ordinal__lt=task.origin_step)
            .select_related("step")
            .order_by("id")
        )
    context: dict[str, Any] = {
        "task": task,
        "origin": origin,
        "again": again,
        "referenced": referenced,
        "restart_form": restart_form_for(user, task),
        "fork_form": fork_form_for(user, task),
    }
    if not (origin or again or context["restart_form"] or context["fork_form"]):
        return ""
    return render_to_string("reviews/_partials/task_again.html", context, request=request)
