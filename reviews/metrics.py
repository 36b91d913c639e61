"""Figures about the people's work: human load, reviewer quality, audit outcomes, and all figures
together for the dashboard and the report command (calibration lives in `reviews.calibration`).

Read-only selectors over gates, audit items and the append-only decision log, filtered by a
`Window` (created in [since, until), optionally one agent). Percentiles interpolate linearly
between ranks (PostgreSQL's `percentile_cont`). The Prometheus gauges of review state (gates and
audit items open, gate wait) are registered with `agentops.plumbing.prometheus` from `reviews.apps`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import Extract
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from agentops.metrics import (
    Completion,
    ResumeSavings,
    Window,
    resume_savings,
    task_completion,
)
from agentops.models import AuditItem, Gate
from agentops.states import AuditStatus, GateStatus
from policies.phrases import Phrase, gettext_noop
from reviews.calibration import Calibration, Proposal, calibration, items_in, lane_of
from reviews.models import Decision

GATE_DECISIONS = ("reviews.gate.approved", "reviews.gate.edited", "reviews.gate.rejected")
AUDIT_DECISIONS = ("reviews.audit.ok", "reviews.audit.flagged")
APPROVALS = frozenset({"reviews.gate.approved", "reviews.gate.edited", "reviews.audit.ok"})
TIMEOUTS = ("reviews.gate.expired", "reviews.gate.escalated")

# Reviewer quality: a decision faster than this many seconds is "fast" (the dashboard's default).
FAST_SECONDS = 3.0
# Patterns listed for an admin: a share of fast decisions, a run of approvals, a share of bulk
# approvals, each only once a person has made enough decisions for it to mean something.
FAST_SHARE_FLAG = 0.25
STREAK_FLAG = 20
BULK_SHARE_FLAG = 0.5
MIN_DECISIONS_FLAG = 4


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th quantile (0..1) with linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _gates_in(window: Window) -> QuerySet[Gate]:
    gates = Gate.objects.filter(created_at__gte=window.since, created_at__lt=window.until)
    if window.agent:
        gates = gates.filter(task__agent=window.agent)
    return gates.order_by()


# -- human load ----------------------------------------------------------------------------------


@dataclass
class HumanLoad:
    gates: int = 0
    # (day, rule, gates opened)
    gates_per_day: list[tuple[date, str, int]] = field(default_factory=list)
    decided_by_people: int = 0
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    sla_breaches: int = 0
    timeouts_taken: int = 0

    @property
    def busiest(self) -> int:
        """The most gates one rule opened in one day (scales the chart)."""
        return max((n for _, _, n in self.gates_per_day), default=0)


def human_load(window: Window, *, now: datetime | None = None) -> HumanLoad:
    """Gates opened in the window: per day and rule; how long people took to decide them (gate
    opened to approved/rejected, p50/p95); SLA breaches (decided after, or still open past, their
    due time, or timed out at least once); timeouts the sweeper took (expired or escalated)."""
    now = now or timezone.now()
    load = HumanLoad()
    rows = list(
        _gates_in(window).values_list("pk", "rule", "status", "created_at", "decided_at", "due_at")
    )
    timeouts = list(
        Decision.objects.filter(
            action__in=TIMEOUTS, detail__gate__in=[row[0] for row in rows]
        ).values_list("detail__gate", flat=True)
    )
    timed_out = set(timeouts)
    per_day: Counter[tuple[date, str]] = Counter()
    latencies: list[float] = []
    for pk, rule, status, created, decided, due in rows:
        per_day[(timezone.localdate(created), rule)] += 1
        if status in (GateStatus.APPROVED, GateStatus.REJECTED) and decided is not None:
            latencies.append((decided - created).total_seconds())
        late = (decided is not None and decided > due) or (status == GateStatus.OPEN and due < now)
        if late or pk in timed_out:
            load.sla_breaches += 1
    load.gates = len(rows)
    load.gates_per_day = [(day, rule, n) for (day, rule), n in sorted(per_day.items())]
    load.decided_by_people = len(latencies)
    load.latency_p50_s = percentile(latencies, 0.5)
    load.latency_p95_s = percentile(latencies, 0.95)
    load.timeouts_taken = len(timeouts)
    return load


# -- reviewer quality ----------------------------------------------------------------------------


@dataclass
class Reviewer:
    person: str
    decisions: int = 0
    approvals: int = 0
    edits: int = 0
    rejections: int = 0
    fast: int = 0
    bulk: int = 0
    gate_approvals: int = 0
    longest_approve_streak: int = 0
    median_seconds: float | None = None
    flags: list[str] = field(default_factory=list)

    @property
    def approval_rate(self) -> float | None:
        return self.approvals / self.decisions if self.decisions else None

    @property
    def bulk_share(self) -> float | None:
        return self.bulk / self.gate_approvals if self.gate_approvals else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "person": self.person,
            "decisions": self.decisions,
            "median_seconds_to_decide": self.median_seconds,
            "approval_rate": self.approval_rate,
            "edits": self.edits,
            "fast_decisions": self.fast,
            "longest_approve_streak": self.longest_approve_streak,
            "bulk_approval_share": self.bulk_share,
            "flags": list(self.flags),
        }


def _available_at(decisions: list[Decision]) -> dict[int, datetime]:
    """When each decision's item became decidable: its gate or audit item was created."""
    gate_ids = {d.detail.get("gate") for d in decisions if d.action in GATE_DECISIONS}
    item_ids = {d.detail.get("item") for d in decisions if d.action in AUDIT_DECISIONS}
    gates = dict(Gate.objects.filter(pk__in=gate_ids - {None}).values_list("pk", "created_at"))
    items = dict(AuditItem.objects.filter(pk__in=item_ids - {None}).values_list("pk", "created_at"))
    out = {}
    for d in decisions:
        created = (
            gates.get(d.detail.get("gate"))
            if d.action in GATE_DECISIONS
            else items.get(d.detail.get("item"))
        )
        if created is not None:
            out[d.pk] = created
    return out


def reviewer_quality(window: Window, *, fast_seconds: float = FAST_SECONDS) -> list[Reviewer]:
    """Per person, the gate decisions and audit verdicts they made in the window.

    Time to decide is the person's think time: from the later of the moment the item became
    decidable and their previous decision, to this decision. Approvals are approve, edit and
    audit ok; the approve streak is the longest run of approvals without a rejection or flag.
    """
    decisions = Decision.objects.filter(
        action__in=(*GATE_DECISIONS, *AUDIT_DECISIONS),
        created_at__gte=window.since,
        created_at__lt=window.until,
    )
    if window.agent:
        from agentops.models import Task

        decisions = decisions.filter(
            task_id_ref__in=Task.objects.filter(agent=window.agent).values("pk")
        )
    rows = list(decisions.order_by("created_at", "id"))
    available = _available_at(rows)
    people: dict[str, Reviewer] = {}
    seconds: dict[str, list[float]] = defaultdict(list)
    previous: dict[str, datetime] = {}
    streak: Counter[str] = Counter()
    for d in rows:
        person = d.actor_label
        r = people.setdefault(person, Reviewer(person=person))
        r.decisions += 1
        start = max(filter(None, [available.get(d.pk), previous.get(person)]), default=None)
        previous[person] = d.created_at
        if start is not None:
            think = max((d.created_at - start).total_seconds(), 0.0)
            seconds[person].append(think)
            if think < fast_seconds:
                r.fast += 1
        if d.action in APPROVALS:
            r.approvals += 1
            streak[person] += 1
            r.longest_approve_streak = max(r.longest_approve_streak, streak[person])
        else:
            r.rejections += 1
            streak[person] = 0
        if d.action == "reviews.gate.edited":
            r.edits += 1
        if d.action in ("reviews.gate.approved", "reviews.gate.edited"):
            r.gate_approvals += 1
            if d.detail.get("bulk"):
                r.bulk += 1
    for person, r in people.items():
        r.median_seconds = percentile(seconds[person], 0.5)
        r.flags = _patterns(r, fast_seconds=fast_seconds)
    return sorted(people.values(), key=lambda r: (-r.decisions, r.person))


def _patterns(r: Reviewer, *, fast_seconds: float) -> list[str]:
    """The reviewer's patterns worth a second look, each a Phrase: English as a str (the JSON
    export, the oversight report and the `report` command), the reader's language on the
    dashboard."""
    flags: list[str] = []
    seconds = int(fast_seconds) if float(fast_seconds).is_integer() else fast_seconds
    if r.decisions >= MIN_DECISIONS_FLAG and r.fast / r.decisions >= FAST_SHARE_FLAG:
        flags.append(
            Phrase(
                gettext_noop("%(fast)s of %(decisions)s decisions in under %(seconds)s s"),
                {"fast": r.fast, "decisions": r.decisions, "seconds": seconds},
            )
        )
    if r.longest_approve_streak >= STREAK_FLAG:
        flags.append(
            Phrase(
                gettext_noop("%(streak)s approvals in a row without a rejection"),
                {"streak": r.longest_approve_streak},
            )
        )
    share = r.bulk_share
    if r.gate_approvals >= MIN_DECISIONS_FLAG and share is not None and share >= BULK_SHARE_FLAG:
        flags.append(
            Phrase(
                gettext_noop("%(bulk)s of %(approvals)s gate approvals made in bulk"),
                {"bulk": r.bulk, "approvals": r.gate_approvals},
            )
        )
    return flags


# -- audit outcomes ------------------------------------------------------------------------------


@dataclass
class AuditOutcome:
    rule: str
    lane: str
    items: int = 0
    reviewed: int = 0
    flagged: int = 0

    @property
    def flag_rate(self) -> float | None:
        return self.flagged / self.reviewed if self.reviewed else None


def audit_outcomes(window: Window) -> list[AuditOutcome]:
    """Audit items created in the window by rule and lane: queued, reviewed, flagged."""
    out: dict[tuple[str, str], AuditOutcome] = {}
    for rule, route, sampled, status in items_in(window).values_list(
        "rule", "route", "sampled", "status"
    ):
        lane = lane_of(route, sampled)
        row = out.setdefault((rule, lane), AuditOutcome(rule=rule, lane=lane))
        row.items += 1
        if status != AuditStatus.PENDING:
            row.reviewed += 1
        if status == AuditStatus.FLAGGED:
            row.flagged += 1
    return [out[key] for key in sorted(out)]


# -- Prometheus: review state at scrape time -----------------------------------------------------

GATE_WAIT_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400)


def review_state_metrics() -> Iterable[Metric]:
    gates_open = GaugeMetricFamily(
        "agentops_gates_open", "Gates waiting for a decision, by rule.", labels=["rule"]
    )
    for rule, n in _count_by(Gate.objects.filter(status=GateStatus.OPEN), "rule"):
        gates_open.add_metric([rule], n)
    items_open = GaugeMetricFamily(
        "agentops_audit_items_open", "Audit items waiting for review, by rule.", labels=["rule"]
    )
    for rule, n in _count_by(AuditItem.objects.filter(status=AuditStatus.PENDING), "rule"):
        items_open.add_metric([rule], n)
    yield gates_open
    yield items_open
    yield gate_wait_histogram()


def _count_by(queryset: QuerySet[Any], column: str) -> list[tuple[str, int]]:
    return list(queryset.order_by().values_list(column).annotate(n=Count("id")).order_by(column))


def gate_wait_histogram() -> Metric:
    """How long decided gates waited (opened to decided, by a person or a timeout), over all
    time: a cumulative histogram counted by PostgreSQL in one query."""
    waits = Gate.objects.filter(decided_at__isnull=False).annotate(
        wait=F("decided_at") - F("created_at")
    )
    counts = waits.aggregate(
        total=Count("id"),
        seconds=Sum(Extract("wait", "epoch")),
        **{
            f"le_{i}": Count("id", filter=Q(wait__lte=timedelta(seconds=bound)))
            for i, bound in enumerate(GATE_WAIT_BUCKETS)
        },
    )
    buckets = [(str(float(bound)), counts[f"le_{i}"]) for i, bound in enumerate(GATE_WAIT_BUCKETS)]
    buckets.append(("+Inf", counts["total"]))
    metric = HistogramMetricFamily(
        "agentops_gate_wait_seconds", "Time gates waited for a decision (decided gates)."
    )
    metric.add_metric([], buckets, sum_value=float(counts["seconds"] or 0))
    return metric


# -- everything, for the dashboard and the report command ----------------------------------------


@dataclass
class Figures:
    window: Window
    fast_seconds: float
    completion: Completion
    savings: ResumeSavings
    load: HumanLoad
    reviewers: list[Reviewer]
    audits: list[AuditOutcome]
    calibration: list[Calibration]

    @property
    def flag_rate_by_rule(self) -> dict[str, float | None]:
        reviewed: Counter[str] = Counter()
        flagged: Counter[str] = Counter()
        for row in self.audits:
            reviewed[row.rule] += row.reviewed
            flagged[row.rule] += row.flagged
        return {rule: (flagged[rule] / n if n else None) for rule, n in sorted(reviewed.items())}

    @property
    def proposals(self) -> list[Proposal]:
        return [c.proposal for c in self.calibration if c.proposal is not None]

    def as_report(self) -> dict[str, Any]:
        """The figures as JSON-ready values (`manage.py report --json`)."""
        c, s, h = self.completion, self.savings, self.load
        return {
            "window": {
                "since": self.window.since.isoformat(),
                "until": self.window.until.isoformat(),
                "agent": self.window.agent or None,
            },
            "completion_rate": c.rate,
            "tasks": c.tasks,
            "tasks_settled": c.settled,
            "tasks_reached_last_step": c.reached_last_step,
            "tasks_in_flight": c.in_flight,
            "stopped_at_step": {str(k): n for k, n in c.stopped_at.items()},
            "failure_kinds": c.failure_kinds,
            "seed_modes": c.seed_modes,
            "tokens_spent": s.tokens_spent,
            "cost_spent": float(s.cost_spent),
            "tokens_saved_by_resume": s.tokens_saved,
            "cost_saved_by_resume": float(s.cost_saved),
            "tokens_from_scratch": s.tokens_from_scratch,
            "tasks_resumed": s.tasks_resumed,
            "gates": h.gates,
            "gates_per_day_by_rule": [
                {"day": day.isoformat(), "rule": rule, "gates": n}
                for day, rule, n in h.gates_per_day
            ],
            "decision_latency_p50_s": h.latency_p50_s,
            "decision_latency_p95_s": h.latency_p95_s,
            "sla_breaches": h.sla_breaches,
            "timeouts_taken": h.timeouts_taken,
            "fast_decision_seconds": self.fast_seconds,
            "reviewers": [r.as_dict() for r in self.reviewers],
            "audit_outcomes": [
                {
                    "rule": a.rule,
                    "lane": a.lane,
                    "items": a.items,
                    "reviewed": a.reviewed,
                    "flagged": a.flagged,
                    "flag_rate": a.flag_rate,
                }
                for a in self.audits
            ],
            "flag_rate_by_rule": self.flag_rate_by_rule,
            "calibration": [
                {
                    "rule": k.rule,
                    "agent": k.agent,
                    "tool": k.tool,
                    "flag_rate_by_lane": {lane: k.flag_rate(lane) for lane in sorted(k.lanes)},
                    "confidence": k.confidence,
                }
                for k in self.calibration
            ],
            "proposals": [
                {
                    "rule": p.rule,
                    "agent": p.agent,
                    "tool": p.tool,
                    "lane": p.lane,
                    "confidence_below": p.threshold,
                    "caught": p.caught,
                    "flagged": p.flagged,
                    "extra_gates_per_day": p.extra_gates_per_day,
                    "text": p.sentence,
                }
                for p in self.proposals
            ],
        }


def figures_collect(window: Window, *, fast_seconds: float = FAST_SECONDS) -> Figures:
    return Figures(
        window=window,
        fast_seconds=fast_seconds,
        completion=task_completion(window),
        savings=resume_savings(window),
        load=human_load(window),
        reviewers=reviewer_quality(window, fast_seconds=fast_seconds),
        audits=audit_outcomes(window),
        calibration=calibration(window),
    )
