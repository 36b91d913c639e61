"""A new task from an old one: start again (`task_restart`) and fork from a step (`task_fork`).

Start again: one command on a stopped or finished task ends it as the person chose (a stopped
one is aborted or cancelled; a finished one is kept as it is) and creates a new task of the same
agent with the same input (or an edited one), in one transaction. Fork: a new task whose steps
before step N are the original's results, referenced and not run again (each keeps the
original's output and recorded model response, and says where it came from in
`spec["adopted_from"]`; no ledger row is copied, so no effect is executed or compensated twice),
and which continues from step N with the same input (or an edited one). Both link the tasks both
ways (`Task.origin`, its reverse `again`). The people's room checks the roles and logs the
decision (`reviews.services.again`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import translation

from agentops.engine.errors import AgentOpsError
from agentops.engine.interventions import task_abort, task_cancel
from agentops.engine.tasks import task_create
from agentops.engine.transitions import step_transition
from agentops.models import Step, Task
from agentops.states import TERMINAL, StepStatus, TaskStatus
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class OriginKind(StrEnum):
    RESTART = "restart"
    FORK = "fork"


class Ending(StrEnum):
    """How the old task ends when it is started again."""

    ABORT = "abort"  # a stopped task: end it now, effects made stay
    CANCEL = "cancel"  # a stopped task: end it now, shown as cancelled
    KEEP = "keep"  # a finished task: leave it as it is


# Where a task may be started again from: stopped for a person, paused, or finished.
STOPPED = frozenset({TaskStatus.NEEDS_ATTENTION, TaskStatus.PAUSED})
ENDINGS = {Ending.ABORT: task_abort, Ending.CANCEL: task_cancel}


class AgainRefused(AgentOpsError):
    """The task cannot be started again or forked this way; the message says why."""


@dataclass(frozen=True)
class Origin:
    """Where a new task comes from; for a fork, `adopted` are the original's steps before the
    first one that runs anew (`from_step`)."""

    task: Task
    kind: OriginKind
    from_step: int | None = None
    adopted: tuple[Step, ...] = ()

    def adopt(self, steps: list[Step]) -> None:
        """Make the new task's first steps the original's results, referenced (not re-run).
        Caller (task creation) holds the transaction; the steps were just inserted."""
        if [s.title for s in steps[: len(self.adopted)]] != [s.title for s in self.adopted]:
            raise AgainRefused(
                Phrase(
                    gettext_noop(
                        "with this input the agent plans other steps: the original's results do "
                        "not fit"
                    )
                )
            )
        for mine, theirs in zip(steps, self.adopted, strict=False):
            spec = {
                **(mine.spec or {}),
                "adopted_from": {
                    "task": theirs.task_id,
                    "step": theirs.pk,
                    "ordinal": theirs.ordinal,
                },
            }
            step_transition(step=mine, name="start")
            step_transition(
                step=mine,
                name="succeed",
                spec=spec,
                output=theirs.output,
                model_response=theirs.model_response,
                approval=theirs.approval,
                route=theirs.route,
                policy_version_number=theirs.policy_version_number,
                policy_rule=theirs.policy_rule,
                prompt_digest=theirs.prompt_digest,
                started_at=theirs.started_at,
                finished_at=theirs.finished_at,
            )

    def event_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"origin": self.task.pk, "origin_kind": self.kind.value}
        if self.from_step is not None:
            payload["from_step"] = self.from_step
        return payload


def _locked(task_id: int) -> Task:
    return (
        Task.objects.select_for_update(of=("self",))
        .select_related("policy_version__policy")
        .get(pk=task_id)
    )


def _again(
    old: Task, *, actor: User, origin: Origin, input: dict[str, Any] | None, goal: str | None
) -> Task:
    return task_create(
        agent=old.agent,
        goal=goal if goal is not None and goal.strip() else old.goal,
        input=old.input if input is None else input,
        created_by=actor,
        token_budget=old.token_budget,
        cost_budget=old.cost_budget,
        wall_time_budget_seconds=old.wall_time_budget_seconds,
        policy=old.policy_version.policy.name if old.policy_version else "default",
        origin=origin,
    )


def task_restart(
    *,
    task_id: int,
    actor: User,
    ending: str,
    input: dict[str, Any] | None = None,
    goal: str | None = None,
    reason: str = "",
) -> Task:
    """End task `task_id` as `ending` says and start a new task of the same agent with the same
    input (or `input`, and `goal`), linked both ways; one transaction. A stopped task (needs a
    person, or paused) must be aborted or cancelled; a finished one is kept as it is. Raises
    AgainRefused otherwise (a task still running or waiting at a gate: stop it first)."""
    with transaction.atomic():
        old = _locked(task_id)
        if old.parent_id is not None:
            raise AgainRefused(
                Phrase(gettext_noop("a child task is started again by its parent's fan-out step"))
            )
        if old.status in TERMINAL:
            if ending != Ending.KEEP:
                raise AgainRefused(
                    Phrase(
                        gettext_noop("the task is %(status)s already: it is kept as it is"),
                        {"status": old.status},
                    )
                )
        elif old.status in STOPPED:
            if ending not in ENDINGS:
                raise AgainRefused(
                    Phrase(gettext_noop("choose how the old task ends: abort or cancel it"))
                )
            ENDINGS[Ending(ending)](task_id=old.pk, actor=actor, reason=reason)
        else:
            # The status as English words (the record's language), kept as written on a page.
            with translation.override("en"):
                status = str(old.get_status_display()).lower()
            raise AgainRefused(
                Phrase(
                    gettext_noop(
                        "the task is %(status)s: only a stopped or finished task is started "
                        "again (pause or cancel it first)"
                    ),
                    {"status": status},
                )
            )
        return _again(
            old, actor=actor, origin=Origin(old, OriginKind.RESTART), input=input, goal=goal
        )


def fork_points(task: Task, steps: list[Step] | None = None) -> list[int]:
    """The steps a fork of `task` may start from (0-based): every step up to and including the
    first one that did not succeed (the steps before a fork point are all succeeded). `steps`:
    the task's steps in order, when the caller has them."""
    if steps is None:
        steps = list(Step.objects.filter(task_id=task.pk).order_by("ordinal"))
    points = []
    for step in steps:
        points.append(step.ordinal)
        if step.status != StepStatus.SUCCEEDED:
            break
    return points


def task_fork(
    *,
    task_id: int,
    actor: User,
    from_step: int,
    input: dict[str, Any] | None = None,
    reason: str = "",
) -> Task:
    """A new task whose steps before `from_step` (0-based) are task `task_id`'s results,
    referenced, and which continues from `from_step` with the same input (or `input`). The
    original is left as it is. Raises AgainRefused for a step that is not a fork point."""
    with transaction.atomic():
        old = _locked(task_id)
        if old.parent_id is not None:
            raise AgainRefused(
                Phrase(gettext_noop("a child task is not forked on its own; fork its parent"))
            )
        if from_step not in fork_points(old):
            raise AgainRefused(
                Phrase(
                    gettext_noop(
                        "step %(step)s is not a place to fork from: every step before it must "
                        "have succeeded"
                    ),
                    {"step": from_step + 1},
                )
            )
        adopted = tuple(
            Step.objects.filter(task_id=old.pk, ordinal__lt=from_step).order_by("ordinal")
        )
        if any(step.spec.get("fanout") or step.spec.get("handoff") for step in adopted):
            raise AgainRefused(
                Phrase(gettext_noop("a fan-out or handoff step is not referenced by a fork yet"))
            )
        origin = Origin(old, OriginKind.FORK, from_step=from_step, adopted=adopted)
        return _again(old, actor=actor, origin=origin, input=input, goal=None)
