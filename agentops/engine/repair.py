"""The engine command that repairs a stopped task's plan (`task_plan_repair`), and what the pages
ask before it (`plan_repair_options`, `plan_repair_preview_load`).

The rules of a repair are `engine/planedit.py`'s; this module locks the task, checks it is
stopped (forward, nothing unconfirmed), writes the plan as the preview computed it in the same
transaction, appends the events (`agentops.task.plan_repaired` with the diff; a skip event for
each removed step), and, when asked, retries the task under the repaired plan. Completed steps
and their ledger rows are never written: the runner continues from the first open step. Who may
repair, and the decision log, belong to the room above (`reviews.services`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentops.engine.errors import NotSerializable, TransitionRefused, UnknownAgent
from agentops.engine.interventions import task_retry
from agentops.engine.jsonvalues import redacted, validated
from agentops.engine.planedit import (
    Draft,
    PlanEdit,
    RepairPreview,
    RepairRefused,
    Targets,
    plan_digest,
    plan_repair_preview,
    repair_targets,
)
from agentops.engine.recovery import intervention_recovery, live_call_steps
from agentops.engine.registry import get_agent
from agentops.engine.transitions import EventSpec, step_transition, task_append_event
from agentops.models import Step, Task, ToolCall
from agentops.states import STEP_TRANSITIONS, LedgerStatus, StepStatus, TaskMode, TaskStatus
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import User

REPAIRED = "agentops.task.plan_repaired"


@dataclass(frozen=True)
class RepairOptions:
    """What the recovery panel offers: the targets, the agent's tools, and why not (if not)."""

    targets: Targets | None
    tools: tuple[str, ...]
    refusal: str = ""


def repair_refusal(task: Task, calls: Sequence[ToolCall]) -> str:
    """Why the plan of `task` may not be repaired now ("" when it may)."""
    if task.status != TaskStatus.NEEDS_ATTENTION:
        return Phrase(
            gettext_noop("task %(task)s is %(status)s: only a stopped task's plan is repaired"),
            {"task": task.pk, "status": task.status},
        )
    if task.mode == TaskMode.ROLLBACK:
        return Phrase(
            gettext_noop("task %(task)s is rolling back: roll back again or abort"),
            {"task": task.pk},
        )
    if any(c.status == LedgerStatus.EXECUTED_UNKNOWN for c in calls):
        return Phrase(
            gettext_noop("a call's outcome is unknown: confirm whether it happened first")
        )
    return ""


def plan_repair_options(
    task: Task, steps: Sequence[Step], calls: Sequence[ToolCall]
) -> RepairOptions:
    """What a repair may change on `task` now, from rows already loaded."""
    refusal = repair_refusal(task, calls)
    if refusal:
        return RepairOptions(None, (), refusal)
    try:
        agent = get_agent(task.agent)
    except UnknownAgent as exc:
        return RepairOptions(None, (), exc.args[0])
    targets = repair_targets(steps, agent, live_call_steps(calls))
    return RepairOptions(targets, tuple(agent.tools))


def _stored_edit(edit: PlanEdit) -> PlanEdit:
    """The typed texts as they would be stored: checked, and secrets redacted."""
    try:
        title = redacted(validated(edit.title, "title"))
        instruction = redacted(validated(edit.instruction, "instruction"))
    except NotSerializable as exc:
        raise RepairRefused(exc.args[0]) from None
    return replace(edit, title=title, instruction=instruction)


def plan_repair_preview_load(
    *, task_id: int, edit: PlanEdit, actor_label: str = ""
) -> RepairPreview:
    """The preview of `edit` on the task as it is now (raises RepairRefused, Task.DoesNotExist)."""
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task=task).order_by("ordinal"))
    calls = list(ToolCall.objects.filter(task=task).defer("args", "result"))
    return _preview(task, steps, calls, _stored_edit(edit), actor_label)


def _preview(
    task: Task, steps: list[Step], calls: list[ToolCall], edit: PlanEdit, actor_label: str
) -> RepairPreview:
    refusal = repair_refusal(task, calls)
    if refusal:
        raise RepairRefused(refusal)
    try:
        agent = get_agent(task.agent)
    except UnknownAgent as exc:
        raise RepairRefused(exc.args[0]) from None
    return plan_repair_preview(
        steps, edit, agent=agent, live_call_steps=live_call_steps(calls), actor_label=actor_label
    )


TaskCheck = Callable[[Task], None]


def _no_check(task: Task) -> None:
    return None


def task_plan_repair(
    *,
    task_id: int,
    edit: PlanEdit,
    actor: User | None,
    reason: str = "",
    then_retry: bool = False,
    seen_digest: str = "",
    check: TaskCheck = _no_check,
) -> tuple[Task, RepairPreview]:
    """Apply one repair to a stopped task's plan; with `then_retry`, retry the task under it in
    the same transaction. Returns the task as it was (locked, with its policy version) and the
    preview applied, for the caller's log.

    `seen_digest`: the digest of the plan the person saw (the preview's `before_digest`); a plan
    that changed since is refused (TransitionRefused), as is a task no longer stopped. A change
    that breaks a rule raises RepairRefused; `check` (the caller's claims) runs on the locked
    task before anything is computed.
    """
    label = getattr(actor, "username", "") or "system"
    edit = _stored_edit(edit)
    with transaction.atomic():
        task = (
            Task.objects.select_for_update(of=("self",))
            .select_related("policy_version")
            .get(pk=task_id)
        )
        if task.status != TaskStatus.NEEDS_ATTENTION:
            raise TransitionRefused(
                Phrase(
                    gettext_noop("task %(task)s is %(status)s; its plan is not repaired"),
                    {"task": task_id, "status": task.status},
                )
            )
        check(task)
        steps = list(Step.objects.filter(task=task).order_by("ordinal"))
        calls = list(ToolCall.objects.filter(task=task).defer("args", "result"))
        if seen_digest and seen_digest != plan_digest(steps):
            raise TransitionRefused(
                Phrase(
                    gettext_noop(
                        "the plan of task %(task)s changed since you saw it: look at it again"
                    ),
                    {"task": task_id},
                )
            )
        preview = _preview(task, steps, calls, edit, label)
        _write(task, preview, actor=actor, label=label, reason=reason)
        if then_retry:
            refusal = intervention_recovery(task).refusal("retry")
            if refusal is not None:
                raise RepairRefused(refusal)
            task_retry(task_id=task_id, actor=actor, reason=reason)
    return task, preview


def _write(
    task: Task, preview: RepairPreview, *, actor: User | None, label: str, reason: str
) -> None:
    """Write the plan as `preview` leaves it, and its events. Caller holds the task's lock."""
    now = timezone.now()
    events: list[EventSpec] = []
    added: dict[str, str] = {}
    for draft in preview.after:
        if draft.row is None:
            Step.objects.create(
                task=task,
                ordinal=draft.ordinal,
                title=draft.title,
                spec=draft.spec,
                depends_on=draft.depends_on,
            )
            added[str(draft.ordinal)] = StepStatus.PENDING
            continue
        _row_write(draft, label=label, reason=reason, now=now)
        if draft.removed and step_transition(
            step=draft.row, name="skip", error=None, finished_at=now
        ):
            events.append(
                EventSpec(
                    STEP_TRANSITIONS["skip"].event,
                    step=draft.ordinal,
                    payload={"reason": draft.removed},
                    fold={"steps": {str(draft.ordinal): StepStatus.SKIPPED}},
                )
            )
    events.append(
        EventSpec(
            REPAIRED,
            payload={
                "op": preview.edit.op,
                "changes": preview.changes,
                "before_digest": preview.before_digest,
                "after_digest": preview.after_digest,
                "runs": [f"{r['step']} {r['title']}" for r in preview.runs],
                "reason": redacted(reason),
            },
            fold={"steps": added} if added else None,
        )
    )
    for index, event in enumerate(events):
        last = index == len(events) - 1
        task_append_event(
            task_id=task.pk,
            event=event,
            actor=actor,
            **({"step_count": len(preview.after)} if last else {}),
        )


def _row_write(draft: Draft, *, label: str, reason: str, now: Any) -> None:
    """Write the row's title, spec and dependencies as the repair leaves them (never its
    ordinal, status or what it recorded), and drop the stuck step's recorded proposal when its
    instruction changed."""
    row = draft.row
    assert row is not None and row.ordinal == draft.ordinal
    spec = dict(draft.spec)
    if draft.removed:
        spec["removed"] = {
            "by": label,
            "at": now.isoformat(),
            "why": draft.removed,
            "reason": redacted(reason),
        }
    before = (row.title, row.spec or {}, list(row.depends_on or []))
    if before != (draft.title, spec, draft.depends_on):
        Step.objects.filter(pk=row.pk).update(
            title=draft.title, spec=spec, depends_on=draft.depends_on
        )
    if draft.reask:
        # The step is asked for again under its new instruction: its recorded proposal (and an
        # approval bound to that proposal's arguments) no longer applies.
        Step.objects.filter(pk=row.pk).update(model_response=None, approval=None)
