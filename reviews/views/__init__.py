"""The review workspace pages: inbox, gate panel, recovery panel, audit queue and decision log.

Views are thin: check the permission (`agentops.plumbing.web.permission_required`, with the
permissions `reviews.roles` registers), parse with a form, call one service or selector, render a
page or its fragment (`agentops.plumbing.web.render_page`). State changes are POST only (with CSRF);
the services check roles, separation of duties and the seen digest again, so a forged request gets
what the page would have refused. A decision that lost a race answers 409 with the current state
rendered; a person who may not decide gets 403 with the reason; form errors answer 400 with what was
typed kept.

The views live in one module per page family (`queue` for the inbox and claims, `gates`,
`recovery`, `audit`, `decisions`, `tasks`, `accounts`; decorators and the CSV export in
`_common`); this package re-exports them, so `urls.py` names them as `views.inbox`.
"""

from __future__ import annotations

from reviews.views._common import (
    CSV_CHUNK_ROWS,
    CSV_FORMULA_PREFIXES,
    CSV_WRITE_ROWS,
    EXCEL_BOM,
    OPERATE,
    REVIEW_AUDIT,
    auditor_required,
    csv_safe,
    csv_stream,
    log_reader_required,
    operator_required,
    reader_required,
)
from reviews.views.accounts import account, account_language, api_token_new, api_token_revoke_view
from reviews.views.again import task_fork_view, task_restart_view
from reviews.views.audit import (
    AUDIT_CSV_HEADER,
    audit_bulk_review,
    audit_csv,
    audit_queue,
    audit_review,
)
from reviews.views.decisions import DECISION_CSV_HEADER, decision_csv, decision_log
from reviews.views.gates import (
    gate_approve_view,
    gate_edit_view,
    gate_panel,
    gate_reject_stop_view,
    gate_reject_view,
)
from reviews.views.grants import scope_grant_view, scope_revoke_view
from reviews.views.plans import plan_repair
from reviews.views.questions import question_answer_view, question_panel
from reviews.views.queue import BULK_RESULTS, assign, claim, gates_bulk_approve_view, inbox, release
from reviews.views.recovery import (
    CONFIRMED_INTERVENTIONS,
    call_confirm,
    intervention,
    recovery_panel,
)
from reviews.views.tasks import task_control, task_modify_view

__all__ = [
    "AUDIT_CSV_HEADER",
    "BULK_RESULTS",
    "CONFIRMED_INTERVENTIONS",
    "CSV_CHUNK_ROWS",
    "CSV_FORMULA_PREFIXES",
    "CSV_WRITE_ROWS",
    "DECISION_CSV_HEADER",
    "EXCEL_BOM",
    "OPERATE",
    "REVIEW_AUDIT",
    "account",
    "account_language",
    "api_token_new",
    "api_token_revoke_view",
    "assign",
    "audit_bulk_review",
    "audit_csv",
    "audit_queue",
    "audit_review",
    "auditor_required",
    "call_confirm",
    "claim",
    "csv_safe",
    "csv_stream",
    "decision_csv",
    "decision_log",
    "gate_approve_view",
    "gate_edit_view",
    "gate_panel",
    "gate_reject_stop_view",
    "gate_reject_view",
    "gates_bulk_approve_view",
    "inbox",
    "intervention",
    "log_reader_required",
    "operator_required",
    "plan_repair",
    "question_answer_view",
    "question_panel",
    "reader_required",
    "recovery_panel",
    "release",
    "scope_grant_view",
    "scope_revoke_view",
    "task_control",
    "task_fork_view",
    "task_modify_view",
    "task_restart_view",
]
