"""Reads behind the review workspace: the inbox, the gate and recovery panels, the audit queue and
the decision log.

Each selector runs a fixed number of queries whatever the number of steps, ledger rows or items
(explicit select_related/prefetch_related), so a panel costs the same at step 2 and at step 200
and the polled inbox costs the same with 3 items and with 300 (it reads one page of them).
Values from the task, the model and the tools are returned as data or plain strings; templates
autoescape them.

The reads live in one module per sub-domain (`inbox`, `tasks`, `gates`, `recovery`, `audit`,
`decisions`, `account`; shared helpers in `_common`); this package re-exports their public names,
so callers import from `reviews.selectors`.
"""

from __future__ import annotations

from reviews.selectors._common import TASK_LOG_LIMIT, pretty_json
from reviews.selectors.account import (
    api_token_list,
    delivery_list_for,
    language_chosen,
    language_for,
)
from reviews.selectors.audit import (
    AUDIT_PAGE_SIZE,
    AuditFilters,
    audit_filter_choices,
    audit_item_export,
    audit_item_get,
    audit_item_page,
)
from reviews.selectors.decisions import (
    LOG_LIMIT,
    POLICY_DECISIONS,
    DecisionFilters,
    LogEntry,
    decision_list_for_task,
    decision_log_iter,
    decision_log_list,
)
from reviews.selectors.gates import (
    PREVIEW_CHARS,
    CheckResult,
    DiffRow,
    GatePanel,
    args_diff,
    gate_checks,
    gate_get_panel,
)
from reviews.selectors.grants import (
    GrantLine,
    grants_visible_to,
    scope_granters_list,
    scope_grants_for_task,
    scope_to_grant,
)
from reviews.selectors.inbox import (
    AGES,
    INBOX_ORDER,
    INBOX_PAGE_SIZE,
    STOPPED_TIMEOUT_ACTION,
    Inbox,
    InboxFilters,
    InboxItem,
    audit_pending_count,
    inbox_counts,
    inbox_filter_choices,
    inbox_list,
    inbox_state,
    operators_list,
    stopped_sla_seconds,
)
from reviews.selectors.questions import QuestionPanel, question_get_panel
from reviews.selectors.recovery import (
    InterventionLine,
    OptionView,
    RecoveryPanel,
    UnknownCall,
    call_repeat_unprotected,
    task_get_recovery_panel,
)
from reviews.selectors.tasks import task_controls_for, task_exists, task_open_gate_id

__all__ = [
    "AGES",
    "AUDIT_PAGE_SIZE",
    "INBOX_ORDER",
    "INBOX_PAGE_SIZE",
    "LOG_LIMIT",
    "POLICY_DECISIONS",
    "PREVIEW_CHARS",
    "STOPPED_TIMEOUT_ACTION",
    "TASK_LOG_LIMIT",
    "AuditFilters",
    "CheckResult",
    "DecisionFilters",
    "DiffRow",
    "GatePanel",
    "GrantLine",
    "Inbox",
    "InboxFilters",
    "InboxItem",
    "InterventionLine",
    "LogEntry",
    "OptionView",
    "QuestionPanel",
    "RecoveryPanel",
    "UnknownCall",
    "api_token_list",
    "args_diff",
    "audit_filter_choices",
    "audit_item_export",
    "audit_item_get",
    "audit_item_page",
    "audit_pending_count",
    "call_repeat_unprotected",
    "decision_list_for_task",
    "decision_log_iter",
    "decision_log_list",
    "delivery_list_for",
    "gate_checks",
    "gate_get_panel",
    "grants_visible_to",
    "inbox_counts",
    "inbox_filter_choices",
    "inbox_list",
    "inbox_state",
    "language_chosen",
    "language_for",
    "operators_list",
    "pretty_json",
    "question_get_panel",
    "scope_granters_list",
    "scope_grants_for_task",
    "scope_to_grant",
    "stopped_sla_seconds",
    "task_controls_for",
    "task_exists",
    "task_get_recovery_panel",
    "task_open_gate_id",
]
