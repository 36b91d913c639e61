"""Every write of human review: gate decisions, audit reviews, inbox claims, the decision log.
Each public service owns its transaction.

Gates and audit items are engine state: the runner opens and queues them, and this package
changes them only through the engine's commands behind its front door (`agentops.engine`:
`gate_decide`, the task controls and interventions), adding the roles, the claims and the
decision log. The sweeper tells the hooks registered here what a timeout did to a gate
(`gate_timeout_logged`), and runs the stopped-task SLA as a sweep hook.

Gate decisions have one path whatever the channel (`gates`: one function per decision,
`gate_decide` for a choice carried as data; the channel is data on the decision, `via`). Check
functions (`gate_check_decider`, `gate_decide_check`, `operator_check`) are separate from do
functions; a gate is locked (`select_for_update`) before it is decided, so a double click or two
operators at once make one decision, and the loser gets GateAlreadyDecided. Interventions on
stopped tasks and confirmations of unknown calls wrap the engine's commands, check the role, and
log the Decision in the same transaction.

The writes live in one module per sub-domain (`claims`, `gates`, `audit`, `rubrics`,
`reservations`, `recovery`, `tasks`, `notifications`, `calibration`; shared errors and the
decision log in `_common`); this package re-exports their public names, so callers import from
`reviews.services`.
"""

from __future__ import annotations

from agentops.engine import INTERVENTIONS, STOP_OUTCOMES
from reviews.services._common import (
    GateAlreadyDecided,
    HeldByOther,
    NotAllowed,
    ReviewError,
    claim_check_or_take_over,
    decision_record,
    operator_check,
)
from reviews.services.again import task_fork_apply, task_restart_apply
from reviews.services.audit import audit_item_review, audit_items_bulk_review
from reviews.services.calibration import calibration_draft_create
from reviews.services.claims import claim_assign, claim_release, claim_take
from reviews.services.gates import (
    BulkResult,
    gate_answer,
    gate_approve,
    gate_check_decider,
    gate_decide,
    gate_decide_check,
    gate_edit_and_approve,
    gate_reject,
    gate_reject_and_stop,
    gate_timeout_logged,
    gates_bulk_approve,
)
from reviews.services.grants import grant_refusal, scope_grant_apply, scope_grant_revoke_apply
from reviews.services.inbox import inbox_changes_fold
from reviews.services.notifications import (
    delivery_attempt_begin,
    delivery_attempt_record,
    notification_preference_get,
    notification_preference_save,
)
from reviews.services.plans import plan_repair_apply
from reviews.services.profiles import language_choose, language_to_session
from reviews.services.recovery import (
    intervention_apply,
    ledger_call_confirm,
    task_restore_from_log,
)
from reviews.services.reservations import (
    ReservedByOther,
    audit_batch_release,
    audit_batch_reserve,
)
from reviews.services.rubrics import (
    rubric_adjudicate,
    rubric_answers_check,
    rubric_create,
    rubric_queue_attach,
    rubric_review_submit,
)
from reviews.services.tasks import (
    TASK_CONTROLS,
    stopped_tasks_escalate_overdue,
    stopped_tasks_sweep,
    task_control_apply,
    task_modify_apply,
)

__all__ = [
    "INTERVENTIONS",
    "STOP_OUTCOMES",
    "TASK_CONTROLS",
    "BulkResult",
    "GateAlreadyDecided",
    "HeldByOther",
    "NotAllowed",
    "ReservedByOther",
    "ReviewError",
    "audit_batch_release",
    "audit_batch_reserve",
    "audit_item_review",
    "audit_items_bulk_review",
    "calibration_draft_create",
    "claim_assign",
    "claim_check_or_take_over",
    "claim_release",
    "claim_take",
    "decision_record",
    "delivery_attempt_begin",
    "delivery_attempt_record",
    "gate_answer",
    "gate_approve",
    "gate_check_decider",
    "gate_decide",
    "gate_decide_check",
    "gate_edit_and_approve",
    "gate_reject",
    "gate_reject_and_stop",
    "gate_timeout_logged",
    "gates_bulk_approve",
    "grant_refusal",
    "inbox_changes_fold",
    "intervention_apply",
    "language_choose",
    "language_to_session",
    "ledger_call_confirm",
    "notification_preference_get",
    "notification_preference_save",
    "operator_check",
    "plan_repair_apply",
    "rubric_adjudicate",
    "rubric_answers_check",
    "rubric_create",
    "rubric_queue_attach",
    "rubric_review_submit",
    "scope_grant_apply",
    "scope_grant_revoke_apply",
    "stopped_tasks_escalate_overdue",
    "stopped_tasks_sweep",
    "task_control_apply",
    "task_fork_apply",
    "task_modify_apply",
    "task_restart_apply",
    "task_restore_from_log",
]
