"""URLs of the review workspace, under /review/. State changes are POST-only endpoints."""

from __future__ import annotations

from django.urls import path

from reviews import dashboard, views
from reviews.views import email_actions, oversight, slack, stops
from reviews.views.audit import audit_batch_give_back, audit_batch_take, audit_dataset
from reviews.views.rubrics import (
    adjudication,
    audit_adjudicate,
    audit_rubric,
    audit_rubric_answer,
    rubric_attach_view,
    rubric_create_view,
    rubrics,
)

app_name = "reviews"
urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("gates/bulk-approve", views.gates_bulk_approve_view, name="gates_bulk_approve"),
    path("gates/<int:gate_id>", views.gate_panel, name="gate"),
    path("gates/<int:gate_id>/approve", views.gate_approve_view, name="gate_approve"),
    path("gates/<int:gate_id>/reject", views.gate_reject_view, name="gate_reject"),
    path("gates/<int:gate_id>/edit", views.gate_edit_view, name="gate_edit"),
    path("gates/<int:gate_id>/reject-stop", views.gate_reject_stop_view, name="gate_reject_stop"),
    path("questions/<int:gate_id>", views.question_panel, name="question"),
    path("questions/<int:gate_id>/answer", views.question_answer_view, name="question_answer"),
    path("tasks/<int:task_id>/claim", views.claim, name="claim"),
    path("tasks/<int:task_id>/release", views.release, name="release"),
    path("tasks/<int:task_id>/assign", views.assign, name="assign"),
    path("tasks/<int:task_id>/pause", views.task_control, {"action": "pause"}, name="task_pause"),
    path(
        "tasks/<int:task_id>/resume", views.task_control, {"action": "resume"}, name="task_resume"
    ),
    path(
        "tasks/<int:task_id>/cancel", views.task_control, {"action": "cancel"}, name="task_cancel"
    ),
    path("tasks/<int:task_id>/modify", views.task_modify_view, name="task_modify"),
    path("tasks/<int:task_id>/recover", views.recovery_panel, name="recover"),
    path("tasks/<int:task_id>/restart", views.task_restart_view, name="task_restart"),
    path("tasks/<int:task_id>/fork", views.task_fork_view, name="task_fork"),
    path("tasks/<int:task_id>/interventions", views.intervention, name="intervention"),
    path("tasks/<int:task_id>/grants", views.scope_grant_view, name="scope_grant"),
    path("grants/<int:grant_id>/revoke", views.scope_revoke_view, name="scope_revoke"),
    path("tasks/<int:task_id>/plan", views.plan_repair, name="plan_repair"),
    path(
        "tasks/<int:task_id>/calls/<int:call_id>/confirm",
        views.call_confirm,
        name="call_confirm",
    ),
    path("audit", views.audit_queue, name="audit"),
    path("audit.csv", views.audit_csv, name="audit_csv"),
    path("audit/dataset.jsonl", audit_dataset, name="audit_dataset"),
    path("audit/<int:item_id>/review", views.audit_review, name="audit_review"),
    path("audit/bulk-review", views.audit_bulk_review, name="audit_bulk_review"),
    path("audit/batch", audit_batch_take, name="audit_batch_take"),
    path("audit/batch/release", audit_batch_give_back, name="audit_batch_release"),
    path("audit/<int:item_id>/rubric", audit_rubric, name="audit_rubric"),
    path("audit/<int:item_id>/rubric/answer", audit_rubric_answer, name="audit_rubric_answer"),
    path("audit/<int:item_id>/adjudicate", audit_adjudicate, name="audit_adjudicate"),
    path("audit/adjudication", adjudication, name="adjudication"),
    path("rubrics", rubrics, name="rubrics"),
    path("rubrics/new", rubric_create_view, name="rubric_create"),
    path("rubrics/attach", rubric_attach_view, name="rubric_attach"),
    path("decisions", views.decision_log, name="decisions"),
    path("decisions.csv", views.decision_csv, name="decisions_csv"),
    path("account", views.account, name="account"),
    path("account/language", views.account_language, name="account_language"),
    path("account/tokens", views.api_token_new, name="api_token_new"),
    path(
        "account/tokens/<int:token_id>/revoke",
        views.api_token_revoke_view,
        name="api_token_revoke",
    ),
    path("account/slack/link/<str:token>", slack.slack_link, name="slack_link"),
    path("account/slack/unlink", slack.slack_unlink, name="slack_unlink"),
    # An Approve or Reject link of a gate email: GET confirms, POST decides.
    path("email-actions/<str:token>", email_actions.email_action, name="email_action"),
    # Slack's Interactivity Request URL: signed by Slack, so no session and no CSRF token.
    path("slack/interactions", slack.slack_interactions, name="slack_interactions"),
    path("oversight", oversight.oversight, name="oversight"),
    path("stops", stops.fleet_stops, name="fleet_stops"),
    path("stops/<int:stop_id>/resume", stops.fleet_resume, name="fleet_resume"),
    path("dashboard", dashboard.dashboard, name="dashboard"),
    path("dashboard/drafts", dashboard.calibration_draft, name="calibration_draft"),
]
