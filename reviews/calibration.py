"""Calibration from audits: are the policy's autonomous lanes right?

Per rule, agent and tool: the flag rate of audit-lane and sampled auto decisions, and the model
confidence of flagged vs. accepted items. When a lane's flag rate is too high, a proposal: the
lowest confidence threshold that would have caught most flagged items, with the extra gates a day
it would have cost. Read-only; an admin turns a proposal into a draft through
`reviews.services.calibration_draft_create`, and nothing publishes itself.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from agentops.metrics import Window
from agentops.models import AuditItem, ToolCall
from agentops.states import AuditStatus
from policies.engine import RUNS_NOW
from policies.phrases import Phrase, gettext_noop

# Calibration: a lane whose flag rate reaches this, over at least this many reviewed items, gets
# a proposal whose threshold catches at least this share of the flagged items.
FLAG_RATE_PROPOSE = 0.2
MIN_REVIEWED_PROPOSE = 5
CATCH_TARGET = 0.8


def lane_of(route: str, sampled: bool) -> str:
    return "sampled auto" if sampled else route


def items_in(window: Window) -> QuerySet[AuditItem]:
    items = AuditItem.objects.filter(created_at__gte=window.since, created_at__lt=window.until)
    if window.agent:
        items = items.filter(agent=window.agent)
    return items.order_by()


CONFIDENCE_BUCKETS = tuple(round(i / 10, 1) for i in range(10))


def confidence_bucket(value: float | None) -> str:
    if value is None:
        return "unknown"
    low = min(math.floor(float(value) * 10) / 10, 0.9)
    return f"{low:.1f}-{low + 0.1:.1f}"


@dataclass
class Proposal:
    """A policy change the audits suggest: gate `tool` for `agent` below `threshold`."""

    rule: str
    agent: str
    tool: str
    lane: str
    threshold: float
    caught: int
    flagged: int
    extra_gates_per_day: float
    policy_id: int | None

    @property
    def caught_share(self) -> float:
        return self.caught / self.flagged if self.flagged else 0.0

    @property
    def sentence(self) -> Phrase:
        """The proposal in words: English as a str (the JSON export's `text`, the same whoever
        asks for it), the reader's language when a page shows it."""
        return Phrase(
            gettext_noop(
                "gate %(tool)s for %(agent)s when confidence < %(threshold)s: it would have "
                "caught %(caught)s of %(flagged)s flagged items (%(share)s) at about "
                "%(per_day)s extra gates a day"
            ),
            {
                "tool": self.tool,
                "agent": self.agent,
                "threshold": f"{self.threshold:.2f}",
                "caught": self.caught,
                "flagged": self.flagged,
                "share": f"{self.caught_share:.0%}",
                "per_day": f"{self.extra_gates_per_day:.1f}",
            },
        )

    @property
    def sentence_html(self) -> str:
        """The proposal in words for a page: the tool's and agent's names kept as written."""
        return self.sentence.__html__()


@dataclass
class Calibration:
    rule: str
    agent: str
    tool: str
    # lane -> (reviewed, flagged)
    lanes: dict[str, tuple[int, int]] = field(default_factory=dict)
    # verdict ("flagged" / "accepted") -> confidence bucket -> items
    confidence: dict[str, dict[str, int]] = field(default_factory=dict)
    proposal: Proposal | None = None

    def flag_rate(self, lane: str) -> float | None:
        reviewed, flagged = self.lanes.get(lane, (0, 0))
        return flagged / reviewed if reviewed else None


def _threshold_catching(confidences: list[float], share: float) -> tuple[float, int]:
    """The lowest two-decimal threshold t such that `confidence < t` holds for at least `share`
    of `confidences`; and how many it catches."""
    ordered = sorted(confidences)
    needed = max(1, math.ceil(share * len(ordered)))
    t = math.floor(ordered[needed - 1] * 100 + 1e-9) / 100 + 0.01
    t = round(min(t, 1.0), 2)
    return t, sum(1 for c in ordered if c < t)


def _confidence_of(response: Any) -> float | None:
    value = response.get("confidence") if isinstance(response, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def calibration(
    window: Window,
    *,
    flag_rate: float = FLAG_RATE_PROPOSE,
    min_reviewed: int = MIN_REVIEWED_PROPOSE,
    catch: float = CATCH_TARGET,
) -> list[Calibration]:
    """Per rule, agent and tool: the flag rate of audit-lane and of sampled auto decisions, the
    model confidence of flagged vs. accepted items, and, when a lane's flag rate reaches
    `flag_rate` over at least `min_reviewed` items, a proposal: the lowest threshold that gates
    at least `catch` of the flagged items, with the extra gates a day it would have opened in
    the window (steps of that rule, agent and tool below the threshold, per day)."""
    rows = (
        items_in(window)
        .exclude(status=AuditStatus.PENDING)
        .values_list(
            "rule",
            "agent",
            "tool",
            "route",
            "sampled",
            "status",
            "step__model_response",
            "task__policy_version__policy_id",
        )
    )
    groups: dict[tuple[str, str, str], Calibration] = {}
    flagged_conf: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    policies: dict[tuple[str, str, str], int | None] = {}
    for rule, agent, tool, route, sampled, status, response, policy_id in rows:
        key = (rule, agent, tool)
        group = groups.setdefault(key, Calibration(rule=rule, agent=agent, tool=tool))
        policies.setdefault(key, policy_id)
        lane = lane_of(route, sampled)
        reviewed, flagged = group.lanes.get(lane, (0, 0))
        is_flag = status == AuditStatus.FLAGGED
        group.lanes[lane] = (reviewed + 1, flagged + int(is_flag))
        conf = _confidence_of(response)
        verdict = "flagged" if is_flag else "accepted"
        buckets = group.confidence.setdefault(verdict, {})
        bucket = confidence_bucket(conf)
        buckets[bucket] = buckets.get(bucket, 0) + 1
        if is_flag and conf is not None:
            flagged_conf[(*key, lane)].append(conf)
    for key, group in groups.items():
        for lane, (reviewed, flagged) in sorted(group.lanes.items()):
            confs = flagged_conf.get((*key, lane))
            if reviewed < min_reviewed or flagged / reviewed < flag_rate or not confs:
                continue
            threshold, caught = _threshold_catching(confs, catch)
            extra = _steps_below(window, rule=key[0], agent=key[1], tool=key[2], below=threshold)
            proposal = Proposal(
                rule=key[0],
                agent=key[1],
                tool=key[2],
                lane=lane,
                threshold=threshold,
                caught=caught,
                flagged=len(confs),
                extra_gates_per_day=round(extra / window.days, 2),
                policy_id=policies.get(key),
            )
            if group.proposal is None or proposal.flagged > group.proposal.flagged:
                group.proposal = proposal
        for verdict in group.confidence:
            group.confidence[verdict] = dict(sorted(group.confidence[verdict].items()))
    return [groups[key] for key in sorted(groups)]


def _steps_below(window: Window, *, rule: str, agent: str, tool: str, below: float) -> int:
    """Autonomous steps of this rule, agent and tool in the window whose recorded confidence
    is below `below`: the gates the proposed rule would have opened."""
    calls = ToolCall.objects.filter(
        created_at__gte=window.since,
        created_at__lt=window.until,
        compensation_of__isnull=True,
        tool=tool,
        task__agent=agent,
        step__policy_rule=rule,
        step__route__in=RUNS_NOW,
    ).values_list("step_id", "step__model_response")
    steps = {step: _confidence_of(response) for step, response in calls}
    return sum(1 for conf in steps.values() if conf is not None and conf < below)


def proposals(window: Window) -> list[Proposal]:
    return [c.proposal for c in calibration(window) if c.proposal is not None]
