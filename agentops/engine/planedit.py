"""A person's repair of a stopped task's plan, computed before anything is written: which steps
may change, what the plan looks like after one change, the diff and what runs next.

Pure Python over rows already loaded (no queries). One change per repair: a step's instruction
(`instruct`), a new step (`insert`), a step removed (`remove`) or another declared strategy
(`strategy`). The rules, in one place:
- What has run is never rewritten: a step that started (or is done) keeps its ordinal, title and
  tool. The step the task is stuck on may get a new instruction when it has no live ledger row
  (its proposal is then asked for again); nothing else about it changes.
- Steps that never started (`pending`, no start recorded) are the plan's open tail. A new step
  goes into it, after the stuck step; the open steps after it move down by one (they have no
  history, so their rows are rewritten in place and one row is added at the end).
- A removed step keeps its row, marked skipped with `spec.removed` (the record is append-only);
  the steps that depended on it depend on its dependencies instead.
- A strategy is another declared plan: the steps it shares with the done part of this plan (by
  title and tool, from the first step) stay; the stuck step, when the strategy does not have it
  and nothing of it ran, is skipped as replaced; the open tail becomes the strategy's remaining
  steps (rows rewritten, added, or left over and removed).
- Dependencies point at earlier steps only, never at a skipped one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentops.engine.errors import AgentOpsError
from agentops.engine.jsonvalues import digest
from agentops.engine.planwords import change_text, not_in, replaced_by
from agentops.engine.registry import DEFAULT_STRATEGY, Agent, PlanStep
from agentops.models import Step
from agentops.states import StepStatus
from policies.phrases import Phrase, gettext_noop

OPS = ("instruct", "insert", "remove", "strategy")
INSTRUCTION_MAX = 2000
TITLE_MAX = 200
STUCK = frozenset({StepStatus.FAILED, StepStatus.RUNNING})


class RepairRefused(AgentOpsError, ValueError):
    """The change breaks a rule of plan repair; the message says which, for the person."""


@dataclass(frozen=True)
class PlanEdit:
    """One change to a plan. `ordinal` (0-based) is the step to instruct or remove, or the place
    of a new step; `depends_on` are ordinals of the plan before the change."""

    op: str
    ordinal: int | None = None
    title: str = ""
    tool: str | None = None
    instruction: str = ""
    depends_on: tuple[int, ...] = ()
    strategy: str = ""


@dataclass
class Draft:
    """A step of the plan as the repair leaves it: the row it is written to (None: a new row)."""

    ordinal: int
    title: str
    spec: dict[str, Any]
    depends_on: list[int]
    status: str
    row: Step | None = None
    # Set on a step the repair removes (or replaces): why, for its `spec.removed`.
    removed: str = ""
    # The stuck step's recorded proposal is dropped: it is asked for again.
    reask: bool = False

    def view(self) -> dict[str, Any]:
        return {
            "step": self.ordinal + 1,
            "title": self.title,
            "tool": self.spec.get("tool"),
            "instruction": self.spec.get("instruction", ""),
            "depends_on": [d + 1 for d in self.depends_on],
            "status": StepStatus.SKIPPED if self.removed else self.status,
        }


@dataclass(frozen=True)
class Targets:
    """What a repair may touch on a task now."""

    instructable: tuple[int, ...]
    removable: tuple[int, ...]
    insert_at: tuple[int, ...]
    strategies: tuple[str, ...]
    current_strategy: str

    @property
    def any(self) -> bool:
        return bool(self.instructable or self.removable or self.insert_at or self.strategies)


@dataclass(frozen=True)
class RepairPreview:
    """The plan after the change, the change as lines of a diff, and what runs next."""

    edit: PlanEdit
    after: list[Draft]
    changes: list[dict[str, Any]]
    before_digest: str
    after_digest: str
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> str:
        said = "; ".join(change_text(c) for c in self.changes) or "no change"
        runs = ", ".join(f"{r['step']} '{r['title']}'" for r in self.runs) or "nothing"
        return f"{said}. Then runs {runs}."


def never_started(step: Step) -> bool:
    return step.status == StepStatus.PENDING and step.started_at is None and not step.attempts


def _live(step: Step, live_call_steps: set[int]) -> bool:
    return step.pk in live_call_steps


def current_strategy(steps: Sequence[Step]) -> str:
    return next(
        (str(s.spec["strategy"]) for s in reversed(steps) if (s.spec or {}).get("strategy")),
        DEFAULT_STRATEGY,
    )


def declared_strategies(agent: Agent) -> dict[str, list[PlanStep]]:
    """The agent's plans by strategy name (its own fixed plan is `default`)."""
    plans = dict(agent.strategies)
    if isinstance(agent.plan, list):
        plans = {DEFAULT_STRATEGY: list(agent.plan), **plans}
    return plans


def _stuck(steps: Sequence[Step]) -> Step | None:
    return next((s for s in steps if s.status in STUCK), None)


def _first_open(steps: Sequence[Step]) -> int:
    """The first ordinal a new step may take: after the stuck step, or the first open step."""
    stuck = _stuck(steps)
    if stuck is not None:
        return stuck.ordinal + 1
    return next((s.ordinal for s in steps if never_started(s)), len(steps))


def repair_targets(
    steps: Sequence[Step], agent: Agent | None, live_call_steps: set[int]
) -> Targets:
    """The steps a repair may instruct or remove, where a new step may go, and the strategies
    it may switch to (none without the agent: it is not registered here)."""
    ordered = sorted(steps, key=lambda s: s.ordinal)
    stuck = _stuck(ordered)
    first = _first_open(ordered)
    instructable = [s.ordinal for s in ordered if never_started(s)]
    if stuck is not None and not _live(stuck, live_call_steps):
        instructable.insert(0, stuck.ordinal)
    removable = [s.ordinal for s in ordered if never_started(s) and s.ordinal >= first]
    insert_at = [
        o for o in range(first, len(ordered) + 1) if all(never_started(s) for s in ordered[o:])
    ]
    current = current_strategy(ordered)
    strategies = [n for n in declared_strategies(agent) if n != current] if agent else []
    return Targets(
        instructable=tuple(sorted(set(instructable))),
        removable=tuple(removable),
        insert_at=tuple(insert_at),
        strategies=tuple(strategies),
        current_strategy=current,
    )


def repair_fixes_the_stop(steps: Sequence[Step], live_call_steps: set[int]) -> bool:
    """Whether a repair can change what happens next: the step the task is stuck on may get a
    new instruction (nothing of it is recorded as run), or, with no stuck step, a step that has
    not started may. The advisor recommends repair only then."""
    stuck = _stuck(sorted(steps, key=lambda s: s.ordinal))
    targets = repair_targets(steps, None, live_call_steps)
    if stuck is not None:
        return stuck.ordinal in targets.instructable
    return bool(targets.instructable)


def _drafts(steps: Sequence[Step]) -> list[Draft]:
    return [
        Draft(s.ordinal, s.title, dict(s.spec or {}), list(s.depends_on or []), s.status, row=s)
        for s in sorted(steps, key=lambda s: s.ordinal)
    ]


def _plan_digest(drafts: Sequence[Draft]) -> str:
    return digest([d.view() for d in drafts])


def plan_digest(steps: Sequence[Step]) -> str:
    """The digest of the plan as a person sees it (a preview's `before_digest`)."""
    return _plan_digest(_drafts(steps))


def _text(value: str, *, what: str, limit: int, required: bool) -> str:
    text = (value or "").strip()
    if required and not text:
        raise RepairRefused(
            Phrase(gettext_noop("%(field)s: say what the step is to do"), {"field": what})
        )
    if len(text) > limit:
        raise RepairRefused(
            Phrase(
                gettext_noop("%(field)s: at most %(most)s characters (%(given)s given)"),
                {"field": what, "most": limit, "given": len(text)},
            )
        )
    if "\x00" in text:
        raise RepairRefused(
            Phrase(
                gettext_noop("%(field)s: contains a NUL character, which cannot be stored"),
                {"field": what},
            )
        )
    return text


def plan_repair_preview(
    steps: Sequence[Step],
    edit: PlanEdit,
    *,
    agent: Agent,
    live_call_steps: set[int],
    actor_label: str = "",
) -> RepairPreview:
    """The plan after `edit`, or RepairRefused naming the rule it breaks."""
    if edit.op not in OPS:
        raise RepairRefused(
            Phrase(
                gettext_noop("unknown change %(op)s: one of %(ops)s"),
                {"op": repr(edit.op), "ops": ", ".join(OPS)},
            )
        )
    targets = repair_targets(steps, agent, live_call_steps)
    before = _drafts(steps)
    after = [
        Draft(d.ordinal, d.title, dict(d.spec), list(d.depends_on), d.status, d.row) for d in before
    ]
    changes: list[dict[str, Any]] = []
    if edit.op == "instruct":
        _instruct(after, edit, targets, changes)
    elif edit.op == "insert":
        _insert(after, edit, targets, changes, agent=agent, actor_label=actor_label)
    elif edit.op == "remove":
        _remove(after, edit, targets, changes)
    else:
        after = _switch(after, edit, targets, changes, agent=agent)
    runs = [d.view() for d in after if not d.removed and d.status not in STEP_DONE_OR_SKIPPED]
    return RepairPreview(
        edit=edit,
        after=after,
        changes=changes,
        before_digest=_plan_digest(before),
        after_digest=_plan_digest(after),
        runs=runs,
    )


STEP_DONE_OR_SKIPPED = frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED})


def _named(after: list[Draft], ordinal: int | None) -> Draft:
    if ordinal is None or not 0 <= ordinal < len(after):
        raise RepairRefused(
            Phrase(
                gettext_noop("there is no step %(step)s"),
                {"step": ordinal + 1 if ordinal is not None else "?"},
            )
        )
    return after[ordinal]


def _instruct(
    after: list[Draft], edit: PlanEdit, targets: Targets, changes: list[dict[str, Any]]
) -> None:
    draft = _named(after, edit.ordinal)
    if draft.ordinal not in targets.instructable:
        raise RepairRefused(
            Phrase(
                gettext_noop(
                    "step %(step)s '%(title)s' has run or holds a recorded call: its "
                    "instruction stays as it was (skip it, or change a step that has not started)"
                ),
                {"step": draft.ordinal + 1, "title": draft.title},
            )
        )
    text = _text(edit.instruction, what="instruction", limit=INSTRUCTION_MAX, required=False)
    old = str(draft.spec.get("instruction") or "")
    if text == old:
        raise RepairRefused(
            Phrase(
                gettext_noop("step %(step)s already has this instruction"),
                {"step": draft.ordinal + 1},
            )
        )
    if text:
        draft.spec["instruction"] = text
    else:
        draft.spec.pop("instruction", None)
    draft.reask = draft.status in STUCK
    changes.append(
        {
            "op": "instruct",
            "step": draft.ordinal + 1,
            "title": draft.title,
            "before": old,
            "after": text,
        }
    )


def _checked_depends(after: list[Draft], depends_on: Sequence[int], *, before: int) -> list[int]:
    deps = sorted(set(depends_on))
    for dep in deps:
        if not 0 <= dep < before:
            raise RepairRefused(
                Phrase(
                    gettext_noop(
                        "a step may depend only on earlier steps: step %(step)s is not before "
                        "step %(before)s"
                    ),
                    {"step": dep + 1, "before": before + 1},
                )
            )
        if after[dep].status == StepStatus.SKIPPED or after[dep].removed:
            raise RepairRefused(
                Phrase(
                    gettext_noop("step %(step)s '%(title)s' was skipped: nothing may depend on it"),
                    {"step": dep + 1, "title": after[dep].title},
                )
            )
    return deps


def _insert(
    after: list[Draft],
    edit: PlanEdit,
    targets: Targets,
    changes: list[dict[str, Any]],
    *,
    agent: Agent,
    actor_label: str,
) -> None:
    at = edit.ordinal
    if at is None or at not in targets.insert_at:
        places = ", ".join(str(o + 1) for o in targets.insert_at) or "none"
        raise RepairRefused(
            Phrase(
                gettext_noop(
                    "a new step can go only after the steps that have run (as step %(places)s)"
                ),
                {"places": places},
            )
        )
    title = _text(edit.title, what="title", limit=TITLE_MAX, required=True)
    instruction = _text(edit.instruction, what="instruction", limit=INSTRUCTION_MAX, required=False)
    if edit.tool and edit.tool not in agent.tools:
        raise RepairRefused(
            Phrase(
                gettext_noop("tool %(tool)s is not one of agent %(agent)s's tools: %(tools)s"),
                {"tool": repr(edit.tool), "agent": agent.name, "tools": ", ".join(agent.tools)},
            )
        )
    deps = _checked_depends(after, edit.depends_on, before=at)
    spec: dict[str, Any] = {"tool": edit.tool or None, "added_by": actor_label}
    if instruction:
        spec["instruction"] = instruction
    for draft in after[at:]:
        changes.append(
            {
                "op": "move",
                "from": draft.ordinal + 1,
                "step": draft.ordinal + 2,
                "title": draft.title,
            }
        )
    new = Draft(at, title, spec, deps, StepStatus.PENDING)
    shifted = [new, *after[at:]]
    rows = [d.row for d in after[at:]]
    for index, draft in enumerate(shifted):
        draft.ordinal = at + index
        draft.depends_on = [d + 1 if d >= at and draft is not new else d for d in draft.depends_on]
        draft.row = rows[index] if index < len(rows) else None
    after[at:] = shifted
    changes.insert(
        0,
        {
            "op": "insert",
            "step": at + 1,
            "title": title,
            "tool": edit.tool or None,
            "instruction": instruction,
            "depends_on": [d + 1 for d in deps],
        },
    )


def _remove(
    after: list[Draft], edit: PlanEdit, targets: Targets, changes: list[dict[str, Any]]
) -> None:
    draft = _named(after, edit.ordinal)
    if draft.ordinal not in targets.removable:
        raise RepairRefused(
            Phrase(
                gettext_noop(
                    "step %(step)s '%(title)s' has started or is done: only a step "
                    "that has not started can be removed (skip a stopped step instead)"
                ),
                {"step": draft.ordinal + 1, "title": draft.title},
            )
        )
    draft.removed = "removed by plan repair"
    changes.append(
        {
            "op": "remove",
            "step": draft.ordinal + 1,
            "title": draft.title,
            "why": Phrase(gettext_noop("removed")),
        }
    )
    for other in after[draft.ordinal + 1 :]:
        if draft.ordinal in other.depends_on:
            other.depends_on = sorted(
                {d for d in other.depends_on if d != draft.ordinal} | set(draft.depends_on)
            )
            changes.append(
                {
                    "op": "depends",
                    "step": other.ordinal + 1,
                    "title": other.title,
                    "after": ", ".join(str(d + 1) for d in other.depends_on),
                }
            )


def _same(draft: Draft, planned: PlanStep) -> bool:
    return draft.title == planned.title and draft.spec.get("tool") == planned.tool


def _switch(
    after: list[Draft],
    edit: PlanEdit,
    targets: Targets,
    changes: list[dict[str, Any]],
    *,
    agent: Agent,
) -> list[Draft]:
    plans = declared_strategies(agent)
    if edit.strategy not in targets.strategies:
        offered = ", ".join(targets.strategies) or "none"
        raise RepairRefused(
            Phrase(
                gettext_noop(
                    "strategy %(strategy)s is not one agent %(agent)s declares besides the "
                    "current one (%(current)s); declared: %(offered)s"
                ),
                {
                    "strategy": repr(edit.strategy),
                    "agent": agent.name,
                    "current": targets.current_strategy,
                    "offered": offered,
                },
            )
        )
    plan = plans[edit.strategy]
    first = targets.insert_at[0] if targets.insert_at else None
    if first is None:
        raise RepairRefused(
            Phrase(
                gettext_noop("the plan has steps that ran after the stopped one: switch refused")
            )
        )
    done = after[:first]
    shared = 0
    while shared < min(len(done), len(plan)) and _same(done[shared], plan[shared]):
        shared += 1
    for draft in done[shared:]:
        if draft.status == StepStatus.SKIPPED:
            continue
        if draft.status in STUCK and draft.ordinal in targets.instructable:
            draft.removed = replaced_by(edit.strategy)
            changes.append(
                {
                    "op": "remove",
                    "step": draft.ordinal + 1,
                    "title": draft.title,
                    "why": draft.removed,
                }
            )
            continue
        raise RepairRefused(
            Phrase(
                gettext_noop(
                    "step %(step)s '%(title)s' has run and strategy %(strategy)s "
                    "does not have it there: the work done does not fit that strategy (start a "
                    "new task instead)"
                ),
                {"step": draft.ordinal + 1, "title": draft.title, "strategy": edit.strategy},
            )
        )
    changes.insert(
        0, {"op": "strategy", "before": targets.current_strategy, "after": edit.strategy}
    )
    old_tail = after[first:]
    for old in old_tail:
        why = not_in(edit.strategy)
        changes.append({"op": "remove", "step": old.ordinal + 1, "title": old.title, "why": why})
    new_tail: list[Draft] = []
    for index, planned in enumerate(plan[shared:]):
        ordinal = first + index
        deps = [d if d < shared else first + (d - shared) for d in planned.depends_on]
        spec: dict[str, Any] = {"tool": planned.tool, "strategy": edit.strategy}
        if planned.fan_out:
            spec["fan_out"] = planned.fan_out
        if planned.handoff:
            spec["handoff"] = planned.handoff
        if planned.instruction:
            spec["instruction"] = planned.instruction
        row = old_tail[index].row if index < len(old_tail) else None
        draft = Draft(ordinal, planned.title, spec, deps, StepStatus.PENDING, row=row)
        new_tail.append(draft)
        changes.append(
            {
                "op": "insert",
                "step": ordinal + 1,
                "title": planned.title,
                "tool": planned.tool,
                "instruction": planned.instruction,
                "depends_on": [d + 1 for d in deps],
            }
        )
    staged = [*done, *new_tail]
    for dep_draft in new_tail:
        _checked_depends(staged, dep_draft.depends_on, before=dep_draft.ordinal)
    for index, old in enumerate(old_tail[len(new_tail) :]):
        old.ordinal = first + len(new_tail) + index
        old.removed = not_in(edit.strategy)
    return [*done, *new_tail, *old_tail[len(new_tail) :]]
