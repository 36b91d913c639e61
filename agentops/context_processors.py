"""Template context every page shares: the engine's status enums, so templates compare a status
with `TaskStatus.RETRY_SCHEDULED` instead of repeating its string."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from agentops.states import AuditStatus, GateStatus, LedgerStatus, StepStatus, TaskStatus

STATUSES = {
    "TaskStatus": TaskStatus,
    "StepStatus": StepStatus,
    "LedgerStatus": LedgerStatus,
    "GateStatus": GateStatus,
    "AuditStatus": AuditStatus,
}


def statuses(request: HttpRequest) -> dict[str, Any]:
    return STATUSES
