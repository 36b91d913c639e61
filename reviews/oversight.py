"""The oversight report: for a period, per agent, what people oversaw and how, as evidence for
the EU AI Act's Article 14(4) (human oversight) and Article 12 (record-keeping).

Read-only selectors over the record (steps, events, gates, audit items) and the append-only
decision log; the same report for the page (printable), its CSV, the API and `manage.py report
oversight`. Each section names the part of the Act it evidences (`EVIDENCES`). The period is
[since, until); a step counts in it when it started in it, a decision when it was made in it, a
stop when it was made or lifted in it.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Q
from django.utils.translation import gettext_noop

from agentops.metrics import Window
from agentops.models import AuditItem, Event, FleetStop, Gate, Step, Task, ToolCall
from agentops.states import AuditStatus, LedgerStatus
from reviews.metrics import percentile, reviewer_quality
from reviews.models import Decision

# What each section evidences, by its key: English in the exports (CSV, JSON), translated on the
# page (marked for the catalogue here, translated by the view).
EVIDENCES: dict[str, str] = {
    "overseen": gettext_noop(
        "Art. 14(4)(a): the overseers could monitor the system's operation: every step routed "
        "to a lane, the gated ones decided by a person before they ran, the audited ones queued "
        "for review after"
    ),
    "decisions": gettext_noop(
        "Art. 14(4)(c), (d): people interpreted the output and decided, named, with how long "
        "they took; Art. 12(3)(d): who verified the results"
    ),
    "overrides": gettext_noop(
        "Art. 14(4)(d): people disregarded, overrode or reversed the output: edits, "
        "rejections, flags, plan repairs, rollbacks, cancels"
    ),
    "automation_bias": gettext_noop(
        "Art. 14(4)(b): awareness of automation bias: approval rate, time to decide and the "
        "rubber-stamping patterns flagged per reviewer"
    ),
    "stops_and_anomalies": gettext_noop(
        "Art. 14(4)(e): the stop button and pauses used; Art. 14(4)(a): anomalies detected "
        "(tasks stopped for a person by kind, effects of unknown outcome, audit flags)"
    ),
    "record": gettext_noop(
        "Art. 12(1), (2): events logged automatically over the period, and the decisions, in "
        "append-only, hash-chained logs"
    ),
}

# Each section's heading on the page, by its key.
SECTION_TITLES: dict[str, str] = {
    "overseen": gettext_noop("Overseen"),
    "decisions": gettext_noop("Decisions"),
    "overrides": gettext_noop("Overrides"),
    "automation_bias": gettext_noop("Automation bias"),
    "stops_and_anomalies": gettext_noop("Stops and anomalies"),
    "record": gettext_noop("Record"),
}

OVERRIDES = {
    "edited": ("reviews.gate.edited",),
    "rejected": ("reviews.gate.rejected", "reviews.gate.rejected_and_stopped"),
    # Counted from the items themselves (`_agent`): a rubric's verdict flags an item too.
    "flagged": (),
    "plan_repaired": ("reviews.plan.repaired",),
    "rolled_back": ("reviews.intervention.rollback",),
    "aborted": ("reviews.intervention.abort", "reviews.task.cancelled"),
    "skipped": ("reviews.intervention.skip",),
}
STOPPED = "agentops.task.stopped"
FAILED = "agentops.step.failed"


@dataclass
class AgentOversight:
    agent: str
    steps_by_lane: dict[str, int] = field(default_factory=dict)
    gates_opened: int = 0
    audit_items: int = 0
    audit_sampled: int = 0
    audit_reviewed: int = 0
    decisions_by_person: dict[str, dict[str, int]] = field(default_factory=dict)
    gate_decision_p50_s: float | None = None
    gate_decision_p95_s: float | None = None
    overrides: dict[str, int] = field(default_factory=dict)
    reviewers: list[dict[str, Any]] = field(default_factory=list)
    approval_rate: float | None = None
    median_seconds_to_decide: float | None = None
    rubber_stamping_flags: list[str] = field(default_factory=list)
    stops: list[dict[str, Any]] = field(default_factory=list)
    task_pauses: int = 0
    stopped_for_a_person: dict[str, int] = field(default_factory=dict)
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    unknown_outcomes: int = 0
    events_logged: int = 0
    decisions_logged: int = 0

    def sections(self) -> dict[str, dict[str, Any]]:
        return {
            "overseen": {
                "steps_by_lane": self.steps_by_lane,
                "steps": sum(self.steps_by_lane.values()),
                "gates_opened": self.gates_opened,
                "audit_items": self.audit_items,
                "audit_items_sampled_from_auto": self.audit_sampled,
                "audit_items_reviewed": self.audit_reviewed,
            },
            "decisions": {
                "by_person": self.decisions_by_person,
                "gate_decision_p50_s": self.gate_decision_p50_s,
                "gate_decision_p95_s": self.gate_decision_p95_s,
            },
            "overrides": self.overrides,
            "automation_bias": {
                "approval_rate": self.approval_rate,
                "median_seconds_to_decide": self.median_seconds_to_decide,
                "reviewers": self.reviewers,
                "rubber_stamping_flags": self.rubber_stamping_flags,
            },
            "stops_and_anomalies": {
                "fleet_stops": self.stops,
                "task_pauses": self.task_pauses,
                "stopped_for_a_person": self.stopped_for_a_person,
                "step_failures_by_kind": self.failures_by_kind,
                "unknown_outcomes": self.unknown_outcomes,
                "audit_flags": self.overrides.get("flagged", 0),
            },
            "record": {
                "events_logged": self.events_logged,
                "decisions_logged": self.decisions_logged,
            },
        }


@dataclass
class OversightReport:
    since: datetime
    until: datetime
    agents: list[AgentOversight]

    def as_dict(self) -> dict[str, Any]:
        return {
            "period": {"since": self.since.isoformat(), "until": self.until.isoformat()},
            "evidences": EVIDENCES,
            "agents": [
                {
                    "agent": a.agent,
                    "sections": {
                        key: {"evidences": EVIDENCES[key], "figures": figures}
                        for key, figures in a.sections().items()
                    },
                }
                for a in self.agents
            ],
        }

    def csv_text(self) -> str:
        """One row per figure: agent, section, figure, value, what it evidences."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["agent", "section", "figure", "value", "evidences"])
        for a in self.agents:
            for key, figures in a.sections().items():
                for name, value in flat(figures):
                    writer.writerow([a.agent, key, name, _cell(value), EVIDENCES[key]])
        return out.getvalue()


def flat(figures: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(figures, dict):
        rows: list[tuple[str, Any]] = []
        for key, value in figures.items():
            rows.extend(flat(value, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    if isinstance(figures, list) and figures and isinstance(figures[0], dict):
        rows = []
        for i, item in enumerate(figures):
            rows.extend(flat(item, f"{prefix}[{i}]"))
        return rows
    return [(prefix, figures)]


def shown(value: Any) -> Any:
    """A figure as the page shows it: a list as its items joined, None as None (n/a)."""
    if isinstance(value, list):
        return "; ".join(map(str, value))
    return value


def _cell(value: Any) -> Any:
    if isinstance(value, list):
        return "; ".join(map(str, value))
    if value is None:
        return ""
    # Text a spreadsheet would run as a formula gets a leading quote (as the other exports).
    if isinstance(value, str) and value.startswith(("=", "+", "-", "@", "\t", "\r")):
        return "'" + value
    return value


def oversight_report(*, since: datetime, until: datetime) -> OversightReport:
    """The report for [since, until): one entry per agent with a step, a gate, an audit item,
    a decision or a stop in the period, by name."""
    names = _agents_in(since, until)
    stops = _stops_in(since, until)
    return OversightReport(
        since=since,
        until=until,
        agents=[_agent(name, since, until, stops) for name in names],
    )


def _in(since: datetime, until: datetime, column: str = "created_at") -> Q:
    return Q(**{f"{column}__gte": since, f"{column}__lt": until})


def _decisions(agent: str, since: datetime, until: datetime) -> Any:
    return Decision.objects.filter(_in(since, until)).filter(
        task_id_ref__in=Task.objects.filter(agent=agent).values("pk")
    )


def _agents_in(since: datetime, until: datetime) -> list[str]:
    def names(rows: Any) -> set[str]:
        return set(rows.order_by().distinct())

    found = names(
        Step.objects.filter(_in(since, until, "started_at")).values_list("task__agent", flat=True)
    )
    found |= names(Gate.objects.filter(_in(since, until)).values_list("task__agent", flat=True))
    found |= names(
        Task.objects.filter(
            pk__in=Decision.objects.filter(_in(since, until)).values("task_id_ref")
        ).values_list("agent", flat=True)
    )
    return sorted(found)


def _stops_in(since: datetime, until: datetime) -> list[FleetStop]:
    made_or_lifted = _in(since, until) | _in(since, until, "lifted_at")
    # A stop in force across the whole period counts too.
    across = Q(created_at__lt=since) & (Q(lifted_at__isnull=True) | Q(lifted_at__gte=until))
    return list(FleetStop.objects.filter(made_or_lifted | across).order_by("created_at", "id"))


def _stop_row(stop: FleetStop) -> dict[str, Any]:
    return {
        "stop": stop.pk,
        "scope": stop.scope,
        "target": stop.target,
        "stopped_by": stop.stopped_by_label,
        "stopped_at": stop.created_at.isoformat(),
        "reason": stop.reason,
        "lifted_by": stop.lifted_by_label,
        "lifted_at": stop.lifted_at.isoformat() if stop.lifted_at else None,
    }


def _agent(name: str, since: datetime, until: datetime, stops: list[FleetStop]) -> AgentOversight:
    a = AgentOversight(agent=name)
    steps = Step.objects.filter(_in(since, until, "started_at"), task__agent=name)
    a.steps_by_lane = {
        (route or "unrouted"): n
        for route, n in steps.order_by()
        .values_list("route")
        .annotate(n=Count("id"))
        .order_by("route")
    }
    gates = Gate.objects.filter(_in(since, until), task__agent=name)
    a.gates_opened = gates.count()
    waits = [
        (decided - created).total_seconds()
        for created, decided in gates.filter(decided_at__isnull=False).values_list(
            "created_at", "decided_at"
        )
        if decided is not None
    ]
    a.gate_decision_p50_s = percentile(waits, 0.5)
    a.gate_decision_p95_s = percentile(waits, 0.95)
    items = AuditItem.objects.filter(_in(since, until), task__agent=name)
    a.audit_items = items.count()
    a.audit_sampled = items.filter(sampled=True).count()
    a.audit_reviewed = items.exclude(status=AuditStatus.PENDING).count()

    decisions = _decisions(name, since, until)
    people: dict[str, Counter[str]] = defaultdict(Counter)
    for person, action in decisions.values_list("actor_label", "action"):
        people[person or "system"][action] += 1
    a.decisions_by_person = {p: dict(sorted(c.items())) for p, c in sorted(people.items())}
    actions = Counter(decisions.values_list("action", flat=True))
    a.overrides = {key: sum(actions[x] for x in names) for key, names in OVERRIDES.items()}
    a.overrides["flagged"] = items.filter(status=AuditStatus.FLAGGED).count()
    a.decisions_logged = sum(actions.values())
    a.task_pauses = actions["reviews.task.paused"]

    reviewers = reviewer_quality(Window(since=since, until=until, agent=name))
    a.reviewers = [r.as_dict() for r in reviewers]
    decided = sum(r.decisions for r in reviewers)
    a.approval_rate = sum(r.approvals for r in reviewers) / decided if decided else None
    medians = [r.median_seconds for r in reviewers if r.median_seconds is not None]
    a.median_seconds_to_decide = percentile(medians, 0.5)
    a.rubber_stamping_flags = [f"{r.person}: {flag}" for r in reviewers for flag in r.flags]

    a.stops = [
        _stop_row(s)
        for s in stops
        if s.scope == "all" or (s.scope == "agent" and s.target == name) or s.scope == "tool"
    ]
    stopped = Event.objects.filter(_in(since, until), action=STOPPED, task__agent=name)
    a.stopped_for_a_person = {
        "tasks": stopped.values("task_id").distinct().count(),
        "stops": stopped.count(),
    }
    failed = Event.objects.filter(_in(since, until), action=FAILED, task__agent=name)
    a.failures_by_kind = dict(
        sorted(
            Counter(
                str((payload or {}).get("failure", {}).get("kind") or "unknown")
                for payload in failed.values_list("payload", flat=True)
            ).items()
        )
    )
    a.unknown_outcomes = ToolCall.objects.filter(
        _in(since, until, "updated_at"),
        task__agent=name,
        status=LedgerStatus.EXECUTED_UNKNOWN,
    ).count()
    a.events_logged = Event.objects.filter(_in(since, until), task__agent=name).count()
    return a
