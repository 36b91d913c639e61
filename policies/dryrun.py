"""Dry-run: what a draft would have done to recorded history. Pure, like the evaluator.

Given the recorded actions of the last N days (each with the lane it actually took) and a draft
spec, count how many actions change lane and by which rule, and project the reviewer load: gates
per day times the median time a human took to decide a gate (120 s when none was recorded).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from policies.catalog import RecordedAction
from policies.engine import PolicySpec, Route, evaluate

DEFAULT_DECISION_SECONDS = 120.0


@dataclass(frozen=True)
class Move:
    """Actions that went `before` in history and would go `after` under the draft."""

    before: str
    after: str
    count: int
    rules: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class DryRunResult:
    days: int
    total: int
    moves: tuple[Move, ...]
    unchanged: int
    lanes_before: dict[str, int]
    lanes_after: dict[str, int]
    rule_hits: tuple[tuple[str, int], ...]
    median_decision_seconds: float
    decisions_recorded: int
    gates_per_day_before: float
    gates_per_day_after: float
    reviewer_hours_per_day_before: float
    reviewer_hours_per_day_after: float
    version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def moved(self) -> int:
        return self.total - self.unchanged

    def lane_rows(self) -> list[tuple[str, int, int]]:
        """(lane, recorded count, count under the spec) for every lane seen on either side."""
        lanes = list(dict.fromkeys([*self.lanes_before, *self.lanes_after]))
        return [
            (lane, self.lanes_before.get(lane, 0), self.lanes_after.get(lane, 0)) for lane in lanes
        ]

    def move_lines(self) -> list[str]:
        """One line per lane change, e.g. `auto → gate: 14 of 900 (large payment 14)`."""
        return [
            f"{m.before} → {m.after}: {m.count} of {self.total} ("
            + ", ".join(f"{rule} {n}" for rule, n in m.rules)
            + ")"
            for m in self.moves
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "total": self.total,
            "moved": self.moved,
            "unchanged": self.unchanged,
            "moves": [
                {"from": m.before, "to": m.after, "count": m.count, "rules": dict(m.rules)}
                for m in self.moves
            ],
            "lanes_before": self.lanes_before,
            "lanes_after": self.lanes_after,
            "rule_hits": dict(self.rule_hits),
            "median_decision_seconds": self.median_decision_seconds,
            "decisions_recorded": self.decisions_recorded,
            "gates_per_day_before": round(self.gates_per_day_before, 3),
            "gates_per_day_after": round(self.gates_per_day_after, 3),
            "reviewer_hours_per_day_before": round(self.reviewer_hours_per_day_before, 3),
            "reviewer_hours_per_day_after": round(self.reviewer_hours_per_day_after, 3),
            **self.extra,
        }


def _lanes(counter: Counter[str]) -> dict[str, int]:
    lanes = {route.value: counter.get(route, 0) for route in Route}
    lanes.update({k: v for k, v in counter.items() if k not in lanes})
    return lanes


def dry_run(spec: PolicySpec, history: Iterable[RecordedAction], *, days: int) -> DryRunResult:
    """Evaluate `spec` against `history` (already limited to the last `days` days)."""
    if days <= 0:
        raise ValueError("days must be 1 or more")
    records = list(history)
    before: Counter[str] = Counter()
    after: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    moves: dict[tuple[str, str], Counter[str]] = {}
    for record in records:
        verdict = evaluate(spec, record.action)
        before[record.routed] += 1
        after[verdict.route] += 1
        hits[verdict.rule] += 1
        if verdict.route != record.routed:
            moves.setdefault((record.routed, verdict.route), Counter())[verdict.rule] += 1
    decided = [r.decided_seconds for r in records if r.decided_seconds is not None]
    median = float(statistics.median(decided)) if decided else DEFAULT_DECISION_SECONDS
    gates_before = before.get(Route.GATE, 0) / days
    gates_after = after.get(Route.GATE, 0) / days
    order = {route.value: i for i, route in enumerate(Route)}
    return DryRunResult(
        days=days,
        total=len(records),
        moves=tuple(
            Move(
                before=b,
                after=a,
                count=sum(rules.values()),
                rules=tuple(sorted(rules.items(), key=lambda kv: (-kv[1], kv[0]))),
            )
            for (b, a), rules in sorted(
                moves.items(), key=lambda kv: (order.get(kv[0][0], 9), order.get(kv[0][1], 9))
            )
        ),
        unchanged=len(records) - sum(sum(c.values()) for c in moves.values()),
        lanes_before=_lanes(before),
        lanes_after=_lanes(after),
        rule_hits=tuple((rule.name, hits.get(rule.name, 0)) for rule in spec.rules)
        + tuple((name, n) for name, n in hits.items() if name not in {r.name for r in spec.rules}),
        median_decision_seconds=median,
        decisions_recorded=len(decided),
        gates_per_day_before=gates_before,
        gates_per_day_after=gates_after,
        reviewer_hours_per_day_before=gates_before * median / 3600,
        reviewer_hours_per_day_after=gates_after * median / 3600,
        version=spec.version,
    )


def dry_run_text(result: DryRunResult, *, title: str) -> str:
    """The result as the plain-text report the `policy dry-run` command prints."""
    lines = [f"{title}: {result.total} recorded actions in the last {result.days} day(s)."]
    if result.moves:
        lines.append("Lane changes:")
        lines.extend(f"  {line}" for line in result.move_lines())
    else:
        lines.append("Lane changes: none")
    lines.append(f"Unchanged: {result.unchanged} of {result.total}")
    lanes = ", ".join(f"{lane} {b} → {a}" for lane, b, a in result.lane_rows())
    lines.append(f"Lanes (history → draft): {lanes}")
    lines.append(
        "Rule hits under the draft: " + ", ".join(f"{name} {n}" for name, n in result.rule_hits)
    )
    basis = (
        f"median of {result.decisions_recorded} recorded decisions"
        if result.decisions_recorded
        else "no recorded decisions, default"
    )
    lines.append(
        f"Reviewer load: {result.gates_per_day_before:.1f} → {result.gates_per_day_after:.1f} "
        f"gates/day x {result.median_decision_seconds:.0f} s ({basis}) = "
        f"{result.reviewer_hours_per_day_before:.2f} → "
        f"{result.reviewer_hours_per_day_after:.2f} reviewer-hours/day"
    )
    return "\n".join(lines)
