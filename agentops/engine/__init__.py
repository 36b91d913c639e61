"""The engine's front door: what the other apps use of it, and nothing else.

`reviews` and `policies` import the engine only from here (`tests/test_boundaries.py` says so);
its modules are private to `agentops`. The surface, by what a caller does with it:

- commands, each one transaction of its own (a savepoint of the caller's): start a task
  (`task_create`), decide a gate (`gate_decide` with a `GateDecision`), control a task
  (`task_control`: pause, resume, cancel), intervene on a stopped task (`task_intervene`: retry,
  skip, rollback, abort, when the advisor offers it now), confirm a call whose outcome
  is unknown (`ledger_confirm`), change budgets or input (`task_modify`), rebuild a stopped
  task's rows from its log (`task_restore`), grant a stopped task the scope a service refused,
  or revoke the grant (`scope_grant`, `scope_grant_revoke`), answer an agent's question
  (`question_answer`; `question_of` reads what it asked), and repair a stopped task's plan
  (`task_plan_repair` with a `PlanEdit`; `plan_repair_options` and `plan_repair_preview_load`
  say what it may change and what it would do), and stop every task of an agent, of a tool or
  all of them, and lift the stop (`fleet_stop`, `fleet_resume`; `stops_in_force` and
  `stop_targets` read them);
- read models: the recovery of a stopped task (`task_recovery`, `Recovery`, `Preview`), what
  stopping at a gate would do (`stop_previews`), a tool's facts (`tool_facts`), the registered
  agents and tools (`get_agent`, `get_tool`), a gate's approval kind and the choices it offers
  (`approval_kind_of`, `Choice`, `approval_kinds_offering`) and a task's rows against the
  fold of its log (`checkpoint_read`, `CheckpointComparison`), and the record's hash chains
  (`task_chain_breaks`, `decision_log_break`, `chain_heads`, `heads_compare`, `ChainBreak`);
- the errors callers catch, the hooks other apps register in their `AppConfig.ready()`
  (`gate_hook_register`, `sweep_hook_register`, `approval_kind_register`), and the few value
  helpers callers need to store and show what the engine stores (`digest`, `redacted`,
  `validated`, `loaded`, `is_pointer`).

Modules inside the engine never import from this package (only from each other), and the door
loads each name on first use: importing one engine module (its errors, its JSON values, as a
process that has not set Django up does) loads that module alone, not the engine and its models.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentops.engine.advisor import Preview, Recommendation
    from agentops.engine.approvals import (
        Approval,
        ApprovalKind,
        Choice,
        OneApprover,
        TwoApprovers,
        approval_kind_of,
        approval_kind_register,
        approval_kinds_offering,
    )
    from agentops.engine.chains import (
        ChainBreak,
        chain_heads,
        decision_log_break,
        heads_compare,
        task_chain_breaks,
    )
    from agentops.engine.checkpoints import CheckpointComparison, CheckpointDifference
    from agentops.engine.decisions import (
        STOP_OUTCOMES,
        DecisionRefused,
        GateDecided,
        GateDecision,
        GateNotOpen,
        gate_decide,
        reject_loop_threshold,
        task_gate_approved,
        task_gate_rejected,
    )
    from agentops.engine.dispatch import job_waiting
    from agentops.engine.errors import (
        AgentOpsError,
        AgentUnavailable,
        NotSerializable,
        StartRefused,
        StepFailure,
        TransitionRefused,
        UnknownAgent,
        UnknownTool,
        message_of,
    )
    from agentops.engine.gates import DEFAULT_GATE_TIMEOUT_SECONDS, gate_hook_register
    from agentops.engine.grants import (
        GRANT_DURATIONS,
        GRANT_MAX_MINUTES,
        GrantRefused,
        scope_grant,
        scope_grant_revoke,
    )
    from agentops.engine.interventions import (
        CONTROLS,
        INTERVENTIONS,
        MODIFIABLE,
        InterventionRefused,
        ledger_confirm,
        task_abort,
        task_control,
        task_intervene,
        task_modify,
        task_pause,
        task_resume,
        task_retry,
        task_rollback,
        task_skip_step,
    )
    from agentops.engine.jsonvalues import (
        digest,
        is_pointer,
        json_parsed,
        loaded,
        redacted,
        validated,
    )
    from agentops.engine.origins import (
        AgainRefused,
        Ending,
        OriginKind,
        fork_points,
        task_fork,
        task_restart,
    )
    from agentops.engine.outbound import outbound_check, outbound_tls
    from agentops.engine.planedit import PlanEdit, RepairPreview, RepairRefused
    from agentops.engine.planwords import change_text
    from agentops.engine.questions import (
        ASK_HUMAN,
        QUESTION,
        QuestionView,
        question_answer,
        question_of,
    )
    from agentops.engine.recovery import (
        Recovery,
        ToolFacts,
        intervention_recovery,
        stop_previews,
        task_recovery,
        tool_facts,
    )
    from agentops.engine.redaction import redacted_cut
    from agentops.engine.registry import get_agent, get_tool
    from agentops.engine.repair import (
        RepairOptions,
        plan_repair_options,
        plan_repair_preview_load,
        task_plan_repair,
    )
    from agentops.engine.restore import checkpoint_read, task_restore
    from agentops.engine.scopes import grants_for, grants_in_force, missing_scope_of
    from agentops.engine.stops import (
        StopConflict,
        StopLifted,
        StopMade,
        StopRefused,
        fleet_resume,
        fleet_stop,
        stop_targets,
        stops_in_force,
    )
    from agentops.engine.sweeper import sweep_hook_register
    from agentops.engine.tasks import START_TASK, task_create

# Each name the door exposes and the module it lives in, loaded on first use (`__getattr__`
# below); the imports under TYPE_CHECKING say the same for mypy, `__all__` for readers and
# the boundary test (tests/test_boundaries.py checks the three agree).
_HOMES: dict[str, tuple[str, ...]] = {
    "agentops.engine.advisor": (
        "Preview",
        "Recommendation",
    ),
    "agentops.engine.approvals": (
        "Approval",
        "ApprovalKind",
        "Choice",
        "OneApprover",
        "TwoApprovers",
        "approval_kind_of",
        "approval_kind_register",
        "approval_kinds_offering",
    ),
    "agentops.engine.chains": (
        "ChainBreak",
        "chain_heads",
        "decision_log_break",
        "heads_compare",
        "task_chain_breaks",
    ),
    "agentops.engine.checkpoints": (
        "CheckpointComparison",
        "CheckpointDifference",
    ),
    "agentops.engine.decisions": (
        "STOP_OUTCOMES",
        "DecisionRefused",
        "GateDecided",
        "GateDecision",
        "GateNotOpen",
        "gate_decide",
        "reject_loop_threshold",
        "task_gate_approved",
        "task_gate_rejected",
    ),
    "agentops.engine.dispatch": ("job_waiting",),
    "agentops.engine.errors": (
        "AgentOpsError",
        "AgentUnavailable",
        "NotSerializable",
        "StartRefused",
        "StepFailure",
        "TransitionRefused",
        "UnknownAgent",
        "UnknownTool",
        "message_of",
    ),
    "agentops.engine.gates": (
        "DEFAULT_GATE_TIMEOUT_SECONDS",
        "gate_hook_register",
    ),
    "agentops.engine.grants": (
        "GRANT_DURATIONS",
        "GRANT_MAX_MINUTES",
        "GrantRefused",
        "scope_grant",
        "scope_grant_revoke",
    ),
    "agentops.engine.interventions": (
        "CONTROLS",
        "INTERVENTIONS",
        "MODIFIABLE",
        "InterventionRefused",
        "ledger_confirm",
        "task_abort",
        "task_control",
        "task_intervene",
        "task_modify",
        "task_pause",
        "task_resume",
        "task_retry",
        "task_rollback",
        "task_skip_step",
    ),
    "agentops.engine.jsonvalues": (
        "digest",
        "is_pointer",
        "json_parsed",
        "loaded",
        "redacted",
        "validated",
    ),
    "agentops.engine.origins": (
        "AgainRefused",
        "Ending",
        "OriginKind",
        "fork_points",
        "task_fork",
        "task_restart",
    ),
    "agentops.engine.outbound": ("outbound_check", "outbound_tls"),
    "agentops.engine.planedit": (
        "PlanEdit",
        "RepairPreview",
        "RepairRefused",
        "change_text",
    ),
    "agentops.engine.recovery": (
        "Recovery",
        "ToolFacts",
        "intervention_recovery",
        "stop_previews",
        "task_recovery",
        "tool_facts",
    ),
    "agentops.engine.questions": (
        "ASK_HUMAN",
        "QUESTION",
        "QuestionView",
        "question_answer",
        "question_of",
    ),
    "agentops.engine.redaction": ("redacted_cut",),
    "agentops.engine.registry": (
        "get_agent",
        "get_tool",
    ),
    "agentops.engine.restore": (
        "checkpoint_read",
        "task_restore",
    ),
    "agentops.engine.scopes": (
        "grants_for",
        "grants_in_force",
        "missing_scope_of",
    ),
    "agentops.engine.repair": (
        "RepairOptions",
        "plan_repair_options",
        "plan_repair_preview_load",
        "task_plan_repair",
    ),
    "agentops.engine.stops": (
        "StopConflict",
        "StopLifted",
        "StopMade",
        "StopRefused",
        "fleet_resume",
        "fleet_stop",
        "stop_targets",
        "stops_in_force",
    ),
    "agentops.engine.sweeper": ("sweep_hook_register",),
    "agentops.engine.tasks": (
        "START_TASK",
        "task_create",
    ),
}

__all__ = [
    "ASK_HUMAN",
    "CONTROLS",
    "DEFAULT_GATE_TIMEOUT_SECONDS",
    "GRANT_DURATIONS",
    "GRANT_MAX_MINUTES",
    "INTERVENTIONS",
    "MODIFIABLE",
    "QUESTION",
    "START_TASK",
    "STOP_OUTCOMES",
    "AgainRefused",
    "AgentOpsError",
    "AgentUnavailable",
    "Approval",
    "ApprovalKind",
    "ChainBreak",
    "CheckpointComparison",
    "CheckpointDifference",
    "Choice",
    "DecisionRefused",
    "Ending",
    "GateDecided",
    "GateDecision",
    "GateNotOpen",
    "GrantRefused",
    "InterventionRefused",
    "NotSerializable",
    "OneApprover",
    "OriginKind",
    "PlanEdit",
    "Preview",
    "QuestionView",
    "Recommendation",
    "Recovery",
    "RepairOptions",
    "RepairPreview",
    "RepairRefused",
    "StartRefused",
    "StepFailure",
    "StopConflict",
    "StopLifted",
    "StopMade",
    "StopRefused",
    "ToolFacts",
    "TransitionRefused",
    "TwoApprovers",
    "UnknownAgent",
    "UnknownTool",
    "approval_kind_of",
    "approval_kind_register",
    "approval_kinds_offering",
    "chain_heads",
    "change_text",
    "checkpoint_read",
    "decision_log_break",
    "digest",
    "fleet_resume",
    "fleet_stop",
    "fork_points",
    "gate_decide",
    "gate_hook_register",
    "get_agent",
    "get_tool",
    "grants_for",
    "grants_in_force",
    "heads_compare",
    "intervention_recovery",
    "is_pointer",
    "job_waiting",
    "json_parsed",
    "ledger_confirm",
    "loaded",
    "message_of",
    "missing_scope_of",
    "outbound_check",
    "outbound_tls",
    "plan_repair_options",
    "plan_repair_preview_load",
    "question_answer",
    "question_of",
    "redacted",
    "redacted_cut",
    "reject_loop_threshold",
    "scope_grant",
    "scope_grant_revoke",
    "stop_previews",
    "stop_targets",
    "stops_in_force",
    "sweep_hook_register",
    "task_abort",
    "task_chain_breaks",
    "task_control",
    "task_create",
    "task_fork",
    "task_gate_approved",
    "task_gate_rejected",
    "task_intervene",
    "task_modify",
    "task_pause",
    "task_plan_repair",
    "task_recovery",
    "task_restart",
    "task_restore",
    "task_resume",
    "task_retry",
    "task_rollback",
    "task_skip_step",
    "tool_facts",
    "validated",
]


def __getattr__(name: str) -> Any:
    """Load what the door exposes on first use (PEP 562): importing one engine module (its
    errors, its JSON values) does not load the whole engine and its models."""
    for module, names in _HOMES.items():
        if name in names:
            value = getattr(import_module(module), name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
