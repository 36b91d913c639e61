"""The review API's oversight report (`reviews.oversight`): a period's report per agent, each
section with what of the EU AI Act's Art. 14(4) and Art. 12 it evidences. For the dashboard's
readers."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from ninja.errors import HttpError

from agentops.api import ROLE, ApiRequest, Error, TokenAuth
from reviews.api._common import router
from reviews.oversight import oversight_report

# The longest period one request reports on.
MAX_DAYS = 366


@router.get(
    "/oversight",
    response={200: dict[str, Any], 400: Error, **ROLE},
    summary="The oversight report for a period (dates, both included), per agent",
    auth=TokenAuth(
        "reviews.read_dashboard",
        gettext_lazy("the oversight report is for operators, auditors and admins"),
    ),
)
def get_oversight_report(
    request: ApiRequest, since: date, until: date, agent: str = ""
) -> dict[str, Any]:
    if until < since:
        raise HttpError(400, _("until is before since"))
    if (until - since).days >= MAX_DAYS:
        raise HttpError(400, _("a report covers at most %(days)s days") % {"days": MAX_DAYS})
    zone = timezone.get_current_timezone()
    report = oversight_report(
        since=datetime.combine(since, time.min, tzinfo=zone),
        until=datetime.combine(until + timedelta(days=1), time.min, tzinfo=zone),
    )
    if agent:
        report.agents = [a for a in report.agents if a.agent == agent]
    return report.as_dict()
