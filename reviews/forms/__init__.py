"""Forms of the review workspace, one module per sub-domain: gate decisions (`gates`), agents'
questions (`questions`), the recovery panel (`recovery`) and plan repair (`plans`), the fleet's
stop button (`stops`), starting a task again and forking it (`again`), scope grants
(`grants`), task controls (`tasks`), the inbox (`inbox`), the audit queue (`audit`), the decision
log (`decisions`), the dashboard (`dashboard`) and a person's account (`accounts`); what they
share is in `_common`. This package re-exports their public names, so callers import from
`reviews.forms`.

Forms only parse and check what a person typed; writes go through `reviews.services`, which
checks roles, separation of duties and the seen digest again.
"""

from __future__ import annotations

from reviews.forms._common import ARGUMENTS_MAX, DIGEST, NOTE_MAX, SELECTION, DateRangeForm
from reviews.forms.accounts import ApiTokenForm, LanguageForm, NotificationPreferenceForm
from reviews.forms.again import ENDING_CHOICES, ForkForm, RestartForm
from reviews.forms.audit import LANE_CHOICES, AuditBulkForm, AuditFilterForm, AuditReviewForm
from reviews.forms.dashboard import DASHBOARD_DAYS, CalibrationDraftForm, DashboardFilterForm
from reviews.forms.decisions import DECISION_ACTIONS, DecisionFilterForm
from reviews.forms.gates import (
    ApproveForm,
    BulkApproveForm,
    EditApproveForm,
    GateSelectionField,
    RejectForm,
    RejectStopForm,
)
from reviews.forms.grants import ScopeGrantForm, ScopeRevokeForm
from reviews.forms.inbox import INBOX_AGES, INBOX_KINDS, INBOX_SORTS, AssignForm, InboxFilterForm
from reviews.forms.plans import PlanRepairForm
from reviews.forms.questions import QuestionAnswerForm
from reviews.forms.recovery import ConfirmForm, InterventionForm
from reviews.forms.stops import FleetResumeForm, FleetStopForm
from reviews.forms.tasks import TaskControlForm, TaskModifyForm

__all__ = [
    "ARGUMENTS_MAX",
    "DASHBOARD_DAYS",
    "DECISION_ACTIONS",
    "DIGEST",
    "ENDING_CHOICES",
    "INBOX_AGES",
    "INBOX_KINDS",
    "INBOX_SORTS",
    "LANE_CHOICES",
    "NOTE_MAX",
    "SELECTION",
    "ApiTokenForm",
    "ApproveForm",
    "AssignForm",
    "AuditBulkForm",
    "AuditFilterForm",
    "AuditReviewForm",
    "BulkApproveForm",
    "CalibrationDraftForm",
    "ConfirmForm",
    "DashboardFilterForm",
    "DateRangeForm",
    "DecisionFilterForm",
    "EditApproveForm",
    "FleetResumeForm",
    "FleetStopForm",
    "ForkForm",
    "GateSelectionField",
    "InboxFilterForm",
    "InterventionForm",
    "LanguageForm",
    "NotificationPreferenceForm",
    "PlanRepairForm",
    "QuestionAnswerForm",
    "RejectForm",
    "RejectStopForm",
    "RestartForm",
    "ScopeGrantForm",
    "ScopeRevokeForm",
    "TaskControlForm",
    "TaskModifyForm",
]
