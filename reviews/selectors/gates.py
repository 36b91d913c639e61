"""The gate panel: what a person sees before deciding a gate (the arguments and their diff, the
checks the tool declares, the preview of what stopping would undo), read in a fixed number of
queries whatever the number of steps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import F
from django.utils.translation import gettext as _

from agentops.engine import (
    Preview,
    ToolFacts,
    UnknownTool,
    approval_kind_of,
    get_tool,
    loaded,
    stop_previews,
    tool_facts,
)
from agentops.models import Gate, Step, Task, ToolCall
from agentops.selectors import StepRow, mark_compensated, step_row
from agentops.states import GateStatus, LedgerStatus
from reviews.selectors._common import holder_of, pretty_json

if TYPE_CHECKING:
    from django.contrib.auth.models import User

PREVIEW_CHARS = 240


@dataclass(frozen=True)
class DiffRow:
    """One argument before (as proposed) and after (as approved)."""

    key: str
    before: str
    after: str
    change: str  # same | changed | added | removed


def args_diff(before: Any, after: Any) -> list[DiffRow]:
    """A readable before/after of two argument objects, key by key (sorted)."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    rows = []
    for key in sorted(set(before) | set(after)):
        old = json.dumps(before[key], ensure_ascii=False, sort_keys=True) if key in before else ""
        new = json.dumps(after[key], ensure_ascii=False, sort_keys=True) if key in after else ""
        if key not in before:
            change = "added"
        elif key not in after:
            change = "removed"
        else:
            change = "same" if before[key] == after[key] else "changed"
        rows.append(DiffRow(str(key), old, new, change))
    return rows


@dataclass(frozen=True)
class CheckResult:
    """One piece of gate evidence: a tool's check of the arguments against earlier results."""

    label: str
    passed: bool
    detail: str


def _result_read(result: Any) -> Any:
    """A recorded result for the checks: an artifact's content, or the pointer as stored when
    the artifact cannot be read (its file lost or changed, its row gone): the checks then judge
    what is there instead of the panel failing."""
    try:
        return loaded(result)
    except (ObjectDoesNotExist, TypeError, ValueError, OSError):
        return result


def gate_checks(gate: Gate, calls: Sequence[ToolCall]) -> list[CheckResult]:
    """Run the gated tool's declared checks against the task's earlier results, from the ledger
    rows the panel loaded (no query of its own). A check that raises reads as failed, with why."""
    try:
        tool = get_tool(gate.tool)
    except UnknownTool:
        return []
    if not tool.checks:
        return []
    results: dict[str, Any] = {}
    for call in calls:
        if call.status == LedgerStatus.SUCCEEDED and call.compensation_of_id is None:
            results[call.tool] = _result_read(call.result)
    arguments = gate.approved_arguments if gate.approved_arguments is not None else gate.arguments
    checked = []
    for label, check in tool.checks:
        try:
            passed, detail = check(arguments, results)
        # An agent's check is agent code run on recorded data: one that raises is shown as a
        # failed check with its error, never hidden and never breaking the panel.
        except Exception as exc:
            passed, detail = False, _("the check could not run: %(error)s") % {"error": exc}
        checked.append(CheckResult(label, bool(passed), str(detail)))
    return checked


@dataclass(frozen=True)
class GatePanel:
    gate: Gate
    task: Task
    steps: list[StepRow]
    calls: Sequence[ToolCall]
    arguments_json: str
    tool: ToolFacts
    holder: User | None
    # Once approved: what was approved, the diff against the proposal, and the ledger row that
    # ran it (None until the worker recorded it).
    approved_json: str = ""
    diff: list[DiffRow] | None = None
    executed: ToolCall | None = None
    executed_json: str = ""
    # What "reject and stop" would do: abort keeps the effects, rollback undoes them.
    stop_previews: dict[str, Preview] | None = None
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def position(self) -> int:
        return self.gate.step.ordinal + 1

    @property
    def is_open(self) -> bool:
        return approval_kind_of(self.gate).is_open(self.gate)

    @property
    def changed(self) -> bool:
        return bool(self.diff) and any(row.change != "same" for row in self.diff or [])


def gate_get_panel(*, gate_id: int) -> GatePanel:
    """A gate with its task, the task's steps and ledger rows, in three queries (four once
    approved: the ledger row that ran the approved arguments).

    Raises Gate.DoesNotExist for an unknown id.
    """
    gate = Gate.objects.select_related(
        "task", "task__created_by", "task__claim__user", "step", "decided_by"
    ).get(pk=gate_id)
    steps = list(Step.objects.filter(task_id=gate.task_id).order_by("ordinal"))
    # Results come along (not args): the tool's evidence checks read them.
    calls = list(
        ToolCall.objects.filter(task_id=gate.task_id)
        .defer("args")
        .annotate(step_ordinal=F("step__ordinal"))
        .order_by("id")
    )
    mark_compensated(steps, calls)
    approved_json, diff, executed, executed_json = "", None, None, ""
    if gate.status == GateStatus.APPROVED and gate.approved_arguments is not None:
        approved_json = pretty_json(gate.approved_arguments)
        diff = args_diff(gate.arguments, gate.approved_arguments)
        executed = (
            ToolCall.objects.filter(
                step_id=gate.step_id,
                compensation_of__isnull=True,
                args_digest=gate.approved_digest,
            )
            .order_by("-id")
            .first()
        )
        executed_json = pretty_json(executed.args) if executed is not None else ""
    return GatePanel(
        gate=gate,
        task=gate.task,
        steps=[step_row(s, limit=PREVIEW_CHARS) for s in steps],
        calls=calls,
        arguments_json=pretty_json(gate.arguments),
        tool=tool_facts(gate.tool, recorded_side_effect=gate.side_effect),
        holder=holder_of(gate.task),
        approved_json=approved_json,
        diff=diff,
        executed=executed,
        executed_json=executed_json,
        stop_previews=stop_previews(calls, steps) if gate.status == GateStatus.OPEN else None,
        checks=gate_checks(gate, calls),
    )
