"""Writes that people and scripts make on tasks, named for the callers in `agentops` (its views
and forms, the development tooling).

The writes are the engine's commands, behind its front door (`agentops.engine`): task creation
(`engine.tasks`), the moves a gate decision makes (`engine.decisions`), and the people's moves on a
task (`engine.interventions`: pause, resume, abort, retry, skip, rollback, confirm, modify), and
the repair of a stopped task's plan (`engine.repair`).
Each owns its transaction and enqueues jobs on commit. Calls go down only: the engine imports
nothing of this module.
"""

from __future__ import annotations

from agentops.engine import (
    MODIFIABLE,
    START_TASK,
    PlanEdit,
    TransitionRefused,
    ledger_confirm,
    reject_loop_threshold,
    task_abort,
    task_create,
    task_gate_approved,
    task_gate_rejected,
    task_modify,
    task_pause,
    task_plan_repair,
    task_resume,
    task_retry,
    task_rollback,
    task_skip_step,
)

__all__ = [
    "MODIFIABLE",
    "START_TASK",
    "PlanEdit",
    "TransitionRefused",
    "ledger_confirm",
    "reject_loop_threshold",
    "task_abort",
    "task_create",
    "task_gate_approved",
    "task_gate_rejected",
    "task_modify",
    "task_pause",
    "task_plan_repair",
    "task_resume",
    "task_retry",
    "task_rollback",
    "task_skip_step",
]
