"""Restore from the log: rebuild a stopped task's rows from its latest snapshot and the events
after it, when the rows disagree with them (`checkpoint_mismatch`).

The log is what the runner wrote in the same transactions as the rows; the rows are what a
person, a partial backup or a bug may have changed since. The fold records the task's progress
state (its status and progress pointer, every step's status, every ledger row's status), so that
is what a restore rewrites; outputs, recorded model responses and ledger results stay as they
are. Only a stopped task (`needs_attention`) is restored: nothing else is running it. Who
restores it, and why, is logged by the caller (`reviews.services.task_restore_from_log`); the
task's log gets `agentops.task.restored` with the differences it mended.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from django.db import transaction

from agentops.engine.chains import task_chain_breaks
from agentops.engine.checkpoints import (
    CheckpointComparison,
    checkpoint_compare,
    outputs_compare,
)
from agentops.engine.interventions import InterventionRefused
from agentops.engine.transitions import EventSpec, rows_restore
from agentops.models import Step, Task, ToolCall
from agentops.states import LedgerStatus, TaskStatus
from policies.phrases import Phrase, gettext_noop

if TYPE_CHECKING:
    from django.contrib.auth.models import User

RESTORED = "agentops.task.restored"


def checkpoint_read(task_id: int) -> CheckpointComparison:
    """The task's rows against the fold of its log, its outputs against its latest snapshot,
    and its hash chains (raises Task.DoesNotExist, or CheckpointMismatch when it has no
    snapshot)."""
    task = Task.objects.get(pk=task_id)
    return _compare(task)


def _compare(task: Task) -> CheckpointComparison:
    steps = list(Step.objects.filter(task_id=task.pk).order_by("ordinal"))
    calls = list(ToolCall.objects.filter(task_id=task.pk).order_by("id"))
    return dataclasses.replace(
        checkpoint_compare(task, steps, calls),
        outputs=outputs_compare(task.pk, steps),
        breaks=tuple(task_chain_breaks(task.pk)),
    )


def task_restore(*, task_id: int, actor: User | None, reason: str) -> CheckpointComparison:
    """Rewrite a stopped task's statuses and progress pointer from the fold of its log, in one
    transaction with the `agentops.task.restored` event. Returns the comparison it mended.

    Refused (InterventionRefused, nothing written) when the task is not stopped, when its record
    was changed (a chain broken, an output not the one its snapshot recorded: the log itself is
    then not to be trusted), when its rows already agree with the log, or when the log names a
    row that no longer exists (a restore rewrites rows; it cannot invent one). The task stays
    stopped: a person then retries it.
    """
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task_id)
        if task.status != TaskStatus.NEEDS_ATTENTION:
            raise InterventionRefused(
                Phrase(
                    gettext_noop(
                        "task %(task)s is %(status)s: only a stopped task (needs attention) is "
                        "restored from its log"
                    ),
                    {"task": task_id, "status": task.status},
                )
            )
        comparison = _compare(task)
        if comparison.record_changed:
            raise InterventionRefused(_record_changed(comparison))
        if not comparison.differences:
            raise InterventionRefused(
                Phrase(
                    gettext_noop(
                        "task %(task)s: the rows agree with snapshot #%(seq)s and the "
                        "%(events)s events after it; nothing to restore"
                    ),
                    {"task": task_id, "seq": comparison.seq, "events": comparison.events},
                )
            )
        steps, calls, current_step = _rewrites(task, comparison)
        rows_restore(
            task_id=task_id,
            current_step=current_step,
            steps=steps,
            calls=calls,
            actor=actor,
            event=EventSpec(
                RESTORED,
                payload={
                    "snapshot_seq": comparison.seq,
                    "events_folded": comparison.events,
                    "differences": [
                        {"field": d.field, "rows": d.rows, "log": d.log}
                        for d in comparison.differences
                    ],
                    "reason": reason,
                },
            ),
        )
    return comparison


def _record_changed(comparison: CheckpointComparison) -> Phrase:
    """Why a task whose record was changed is not restored from it."""
    found = [str(b) for b in comparison.breaks] + [
        f"step {d.field.partition('.')[2]}'s output is not the one snapshot #{comparison.seq} "
        "recorded"
        for d in comparison.outputs
    ]
    return Phrase(
        gettext_noop(
            "task %(task)s is not restored: its record was changed (%(found)s); "
            "a restore rewrites rows from the log and would spread the change"
        ),
        {"task": comparison.task_id, "found": "; ".join(found)},
    )


def _rewrites(
    task: Task, comparison: CheckpointComparison
) -> tuple[dict[int, str], dict[int, str], int | None]:
    """What to write: step statuses by ordinal, ledger statuses by row id, the pointer."""
    unrestorable: list[str] = []
    steps: dict[int, str] = {}
    calls: dict[int, str] = {}
    current_step: int | None = None
    by_key = dict(ToolCall.objects.filter(task_id=task.pk).values_list("idempotency_key", "id"))
    ordinals = set(Step.objects.filter(task_id=task.pk).values_list("ordinal", flat=True))
    for difference in comparison.differences:
        group, _, key = difference.field.partition(".")
        if group == "status":
            unrestorable.append(
                f"the log says the task is {difference.log}, the row {difference.rows}"
            )
        elif group == "current_step":
            current_step = int(difference.log)
        elif group == "steps":
            if difference.log is None or int(key) not in ordinals:
                unrestorable.append(f"step {key} is in one of the rows and the log only")
            else:
                steps[int(key)] = difference.log
        elif key not in by_key:
            unrestorable.append(f"the log records a ledger row {key} that does not exist")
        else:
            # A row the log does not hold (or holds as failed) is failed: its effect is not
            # counted, and a retry with the same key finds out whether it happened.
            calls[by_key[key]] = difference.log or LedgerStatus.FAILED
    if unrestorable:
        raise InterventionRefused(
            Phrase(
                gettext_noop("task %(task)s cannot be restored from its log: %(why)s"),
                {"task": task.pk, "why": "; ".join(unrestorable)},
            )
        )
    return steps, calls, current_step
