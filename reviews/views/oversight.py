"""The oversight report's page (`reviews.oversight`): a period's report per agent, printable, and
the same as CSV and JSON (`?format=csv`, `?format=json`). For the dashboard's readers."""

from __future__ import annotations

import json
from typing import cast

from django.http import HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET

from agentops.metrics import agent_names
from agentops.plumbing.web import AuthenticatedHttpRequest, permission_required
from reviews.forms import DashboardFilterForm
from reviews.oversight import EVIDENCES, SECTION_TITLES, flat, oversight_report, shown


@permission_required(
    "reviews.read_dashboard",
    refusal=cast(
        str,
        gettext_lazy("only operators, auditors and policy admins may read the oversight report"),
    ),
)
@require_GET
def oversight(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = DashboardFilterForm(request.GET or None, agents=agent_names())
    window = form.window()
    report = oversight_report(since=window.since, until=window.until)
    if window.agent:
        report.agents = [a for a in report.agents if a.agent == window.agent]
    name = f"oversight-{window.since.date()}-{window.until.date()}"
    kind = request.GET.get("format", "")
    if kind == "csv":
        response = HttpResponse(report.csv_text(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        return response
    if kind == "json":
        response = HttpResponse(
            json.dumps(report.as_dict(), indent=2, sort_keys=True),
            content_type="application/json",
        )
        response["Content-Disposition"] = f'attachment; filename="{name}.json"'
        return response
    query = request.GET.copy()
    query.pop("format", None)
    return render(
        request,
        "reviews/oversight.html",
        {
            "form": form,
            "report": report,
            "agents": [
                (
                    a.agent,
                    [
                        (
                            _(SECTION_TITLES[key])
                            if key in SECTION_TITLES
                            else key.replace("_", " ").capitalize(),
                            _(EVIDENCES[key]),
                            [(name, shown(value)) for name, value in flat(figures)],
                        )
                        for key, figures in a.sections().items()
                    ],
                )
                for a in report.agents
            ],
            "query": query.urlencode(),
        },
    )
