"""Reads of a task's family: its parent, its child tasks and the child that stopped.

Used by the task page and the recovery panel to show the tree. A task with no parent and no
fan-out step costs no query; otherwise two (the parent, the children).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from agentops.models import Step, Task
from agentops.states import TaskStatus
from policies.phrases import kept

# A child in one of these waits for a person; its parent waits for the child.
STOPPED_FOR_A_PERSON = frozenset(
    {TaskStatus.NEEDS_ATTENTION, TaskStatus.AWAITING_APPROVAL, TaskStatus.PAUSED}
)


@dataclass(frozen=True)
class Member:
    task: Task
    # The step of the parent that spawned it (1-based), for children.
    step_number: int | None

    @property
    def failure_message(self) -> str:
        failure = self.task.failure if isinstance(self.task.failure, dict) else {}
        return str(failure.get("message", ""))


@dataclass(frozen=True)
class Family:
    parent: Member | None
    children: list[Member]

    @property
    def stopped_children(self) -> list[Member]:
        return [c for c in self.children if c.task.status in STOPPED_FOR_A_PERSON]

    @property
    def waiting_on(self) -> str:
        """The breakpoint of a parent parked on its children, naming the child that stopped, in
        the reader's language: HTML, with the agent's name and the failure's message (the
        record) in `translate="no"` spans, everything else escaped."""
        stopped = self.stopped_children
        unfinished = [c for c in self.children if not c.task.is_terminal]
        if stopped:
            child = stopped[0]
            pattern = _(
                "step %(number)s waits on child task #%(id)s (%(agent)s), which stopped: "
                "%(message)s"
            )
            return mark_safe(  # Every part is escaped here.
                conditional_escape(pattern)
                % {
                    "number": conditional_escape(str(child.step_number)),
                    "id": conditional_escape(str(child.task.pk)),
                    "agent": kept(child.task.agent),
                    "message": kept(child.failure_message),
                }
            )
        if unfinished:
            return ngettext(
                "step %(number)s waits on %(count)s child task",
                "step %(number)s waits on %(count)s child tasks",
                len(unfinished),
            ) % {"number": unfinished[0].step_number, "count": len(unfinished)}
        return ""


def _ordinal(step: Step | None) -> int:
    assert step is not None, "a child task always records the step that spawned it"
    return step.ordinal


def task_family(task: Task, *, has_fan_out: bool) -> Family | None:
    """The family of `task` (None when it has neither a parent nor a fan-out step)."""
    if task.parent_id is None and not has_fan_out:
        return None
    parent = None
    if task.parent_id is not None:
        parent = Member(Task.objects.get(pk=task.parent_id), _ordinal(task.parent_step) + 1)
    children = [
        Member(child, _ordinal(child.parent_step) + 1)
        for child in Task.objects.filter(parent_id=task.pk)
        .select_related("parent_step")
        .order_by("parent_step__ordinal", "fanout_index")
    ]
    if parent is None and not children:
        return None
    return Family(parent=parent, children=children)


def has_fan_out_step(steps: list[Any]) -> bool:
    return any((getattr(s, "spec", None) or {}).get("fan_out") for s in steps)


__all__ = ["Family", "Member", "has_fan_out_step", "task_family"]
